"""PPFT (Yoon et al.): text-free inference and fine-tuning from privatized pooled embeddings."""
