"""One process or many (torchrun): process group, FSDP2 sharding, the
consolidated state dict and the sharded optimizer checkpoint.

Under torchrun (WORLD_SIZE > 1) the process group is NCCL on CUDA and gloo
on CPU; each decoder layer and then the whole model are wrapped with
``torch.distributed.fsdp.fully_shard`` (FSDP2: parameters, gradients and
AdamW state sharded over every rank), with a MixedPrecisionPolicy of the
configured parameter dtype and float32 gradient reduction, and optionally
CPUOffloadPolicy. With one process the model is used as it is.

Optimizer state: ``torch.distributed.checkpoint`` (DCP) saves the fp32
master weights and AdamW state as one sharded checkpoint directory that any
number of processes loads again (DCP reshards on load).
"""

from __future__ import annotations

import os
from typing import Dict, Optional

import torch
import torch.distributed as dist


def world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def setup(device_name: str) -> torch.device:
    """Initialise the process group when launched by torchrun (WORLD_SIZE
    > 1) and return this process's device: cuda:LOCAL_RANK under torchrun
    on CUDA, else as configured ("auto": cuda if available)."""
    n = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available() and device_name != "cpu"
    if n > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    if n > 1 and cuda:
        d = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(d)
        return d
    if device_name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    d = torch.device(device_name)
    if d.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"config device {device_name!r}: CUDA is not available")
    return d


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def decoder_layers(model: torch.nn.Module):
    """The transformer blocks of a transformers causal LM (model.model.layers
    for Llama, Qwen3, Qwen3-MoE, Mistral, ...)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no model.layers to shard")
    return layers


def shard(model: torch.nn.Module, param_dtype: Optional[torch.dtype], offload: bool) -> torch.nn.Module:
    """FSDP2 full sharding: each decoder layer, then the root (embeddings,
    final norm, LM head). Parameters are gathered in ``param_dtype`` (None:
    their own, float32) and gradients reduced in float32."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    kw = {"mp_policy": mp}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


def full_state_dict(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """The consolidated model state dict on CPU (every rank takes part;
    with FSDP only rank 0's is complete)."""
    if world() == 1:
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_train_state(model: torch.nn.Module, opt: torch.optim.Optimizer, path: str) -> None:
    """Save fp32 master weights and AdamW state with DCP into ``path``
    (one .distcp file per rank plus .metadata)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)


def load_train_state(model: torch.nn.Module, opt: torch.optim.Optimizer, path: str) -> None:
    """Load what save_train_state wrote into ``model`` and ``opt``,
    resharded to this run's process count."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def all_sum(x: torch.Tensor) -> torch.Tensor:
    """x summed over ranks (x itself with one process)."""
    if world() > 1:
        x = x.clone()
        dist.all_reduce(x)
    return x


def all_max(x: torch.Tensor) -> torch.Tensor:
    """x's maximum over ranks (x itself with one process)."""
    if world() > 1:
        x = x.clone()
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x
