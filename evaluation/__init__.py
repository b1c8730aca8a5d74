"""Evaluation of cross-modal retrieval: metrics as pure NumPy functions by subject (``retrieval``,
``neighborhoods``, ``calibration``, ``proximity``, ``statistics`` on the shared ``embeddings`` rules), the
evaluation of one test split (``evaluate``, ``protocol``) and the report (``report``)."""
