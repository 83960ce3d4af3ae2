"""What `batchsim calibrate engine` fits and for how long, without the fit's imports (the
command line reads them for its defaults)."""

from __future__ import annotations

# The engine profile's costs that the fit can move, in the order of its cost vectors.
PARAMETERS = ("frontend_latency_s", "frontend_serial_s", "step_overhead_s",
              "per_seq_overhead_s", "frontend_stream_s", "compute_scale")
MAX_ITERATIONS = 4  # Gauss-Newton iterations per start
