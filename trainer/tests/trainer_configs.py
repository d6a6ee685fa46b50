"""Explicit trainer configs for the Python tests.

The trainer's TrainConfig has no default values: the Go side
(stages/grpo.TrainerConfig) writes every key and load_config refuses a
missing one. The tests build their configs here instead, from BASE, a
fixed set of values chosen for the tests (they are not the grpo stage's
defaults: its lr is grpo.lr's 1e-5, its seed derived per round; the
stage's actual config is CONTRACT, written by the Go test
TestTrainerConfigContract). Every key must be given, so BASE names each
TrainConfig field once (test_trainer.ContractTest checks it).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from spade_trainer.config import TrainConfig

# The grpo stage's config for config.Default()'s round 1, generated from
# the Go struct (stages/grpo.TrainerConfigContract).
CONTRACT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "trainer_config.json")

# The tests' base values, one per TrainConfig field.
BASE: Dict[str, Any] = {
    "lr": 1e-6,
    "clip_epsilon": 0.2,
    "clip_epsilon_high": 0.0,
    "kl_beta": 0.0,
    "grad_clip": 1.0,
    "inner_steps": 1,
    "micro_batch_size": 1024,
    "max_tokens_per_micro_batch": 16384,
    "seed": 0,
    "dtype": "auto",
    "device": "auto",
    "weight_decay": 0.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_eps": 1e-8,
    "max_seq_len": 8192,
    "overlong": "truncate_left",
    "save_dtype": "bfloat16",
    "reference_checkpoint": "",
    "attn_implementation": "",
    "gradient_checkpointing": False,
    "offload": False,
    "compile": False,
    "resume_optimizer": True,
    "save_optimizer": True,
    "tis_cap": 0.0,
    "mismatch_warn": 0.1,
    "loss_aggregation": "token_mean",
    "train_reasoning": "generated",
    "agent_samples": "play",
}


def config_dict(**over: Any) -> Dict[str, Any]:
    """BASE with the keyword arguments replacing its values: the JSON
    object of a --config file. A key BASE lacks is a TypeError (a typo
    must not pass as a setting)."""
    extra = set(over) - set(BASE)
    if extra:
        raise TypeError(f"not TrainConfig fields: {sorted(extra)}")
    return {**BASE, **over}


def train_config(**over: Any) -> TrainConfig:
    """TrainConfig(**config_dict(**over))."""
    return TrainConfig(**config_dict(**over))


def write_config(path: str, **over: Any) -> str:
    """Write config_dict(**over) as JSON to path; return path."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config_dict(**over), f)
    return path
