"""One run: its options and plan, the staging folder it is written into, the predictor instances, the LoadGen
test and accuracy scoring in order (:mod:`.runner`), and the metadata it leaves."""
