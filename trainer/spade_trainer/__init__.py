"""spade_trainer: the SPADE GRPO trainer (one round per process).

Run as ``python -m spade_trainer`` (see cli.py and docs/training.md). The
core needs only PyTorch (>= 1.13); transformers and safetensors are used when
importable (real Hugging Face checkpoints on GPUs) and never required.
"""

__all__ = ["checkpoint", "cli", "config", "grpo", "model", "safetensors_io", "tokenizer"]
