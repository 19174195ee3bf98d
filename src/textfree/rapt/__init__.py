"""RAPT (Li et al., arXiv 2305.06212): fine-tuning and inference on text privatized on the client with T2T / PCT2T,
helped by privatized-token reconstruction. See docs/rapt.md."""
