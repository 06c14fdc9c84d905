"""OpenImages (MLPerf subset) for RetinaNet: official layout, synthetic set, reference pre/post-processing, mAP."""
