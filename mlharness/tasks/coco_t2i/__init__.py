"""COCO-2014 captions / stable-diffusion-xl: the captions and fixed-latent layout, a synthetic set, the oracle
model, and CLIP score with FID as ``text_to_image/tools/accuracy_coco.py`` computes them."""

METRICS = {"coco_t2i": "mlharness.tasks.coco_t2i.metric:CocoT2IMetric"}
