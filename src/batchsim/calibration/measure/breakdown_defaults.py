"""The steps `batchsim calibrate breakdown` profiles unless told otherwise.

A module of its own, importing nothing, so that the command line can show them in its help
without loading pandas or torch.
"""

DEFAULT_PREFILL_LENGTHS = (512, 2048, 8192)
DEFAULT_DECODE_POINTS = ((32, 2048), (128, 2048))  # (batch, context)
