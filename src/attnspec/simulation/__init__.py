"""Softmax MHSA and its Gaussian-equivalent surrogate: draws, outputs and spectra."""
from ..config import alpha_of_beta
from .attention import softmax_rows, surrogate_attention
from .blocks import Blocks, draw_blocks, stack_blocks
from .mhsa import MODELS, SimulationResult, simulate, simulate_outputs

__all__ = ["alpha_of_beta", "softmax_rows", "surrogate_attention", "Blocks", "draw_blocks", "stack_blocks",
           "MODELS", "SimulationResult", "simulate", "simulate_outputs"]
