"""`ref_serve.serve_ranges` compiled with numba (`pip install 'stepc[fast]'`): loaded
only once a run has served enough requests to repay numba's start-up."""

from __future__ import annotations

from numba import njit

from stepc.sim.hbm.ref_serve import serve_ranges

serve_ranges_compiled = njit(cache=True, nogil=True)(serve_ranges)
