"""Object detection shared by the OpenImages (RetinaNet) and COCO (YOLO) tasks: the 7-float response encoding,
the COCO-style mAP of the official scripts, synthetic scenes and the known-answer oracle graphs."""
