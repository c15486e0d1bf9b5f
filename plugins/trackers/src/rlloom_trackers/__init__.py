"""rlloom-trackers: TensorBoard, Weights & Biases and MLflow trackers (``trainer.trackers=[...]``)."""
