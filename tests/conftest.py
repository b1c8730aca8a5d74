import os

# Two cores on CI: keep BLAS/torch from oversubscribing them, and the runs offline-safe.
os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("MKL_NUM_THREADS", "2")
os.environ.setdefault("MPLBACKEND", "Agg")
