import os

# Two cores on CI: keep BLAS/torch from oversubscribing them, and the runs offline-safe.
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("MKL_NUM_THREADS", "2")
# Idle OpenMP threads sleep instead of spinning: on a shared machine spinning threads slowed tests ~10x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MPLBACKEND", "Agg")
