"""Where torch computations run: the one rule both papers' GPU paths use to read a ``device`` parameter.

``"cpu"`` is each trainer's default and selects its CPU implementation (the fused mesa kernel, the NumPy
closed-form cot gradients); any other torch device (``"cuda"``, ``"cuda:1"``, ``"cpu:0"``) selects the torch
implementation on that device, so ``"cpu:0"`` runs the GPU code path on the CPU (as the tests do)."""

from __future__ import annotations

from companion.params import ParameterError

__all__ = ["check_device"]


def check_device(device):
    """The :class:`torch.device` for ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...); raises
    :class:`companion.params.ParameterError` naming ``device`` for a CUDA device when
    ``torch.cuda.is_available()`` is False, or for anything torch does not take as a device."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError("device", f"must be 'cpu' or 'cuda' (a torch device); got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError("device", f"{device!r} needs CUDA, and torch.cuda.is_available() is False "
                                       "here; use device='cpu'")
    return dev
