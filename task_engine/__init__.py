"""Hashed Luigi tasks: output folders named by a hash of their settings and inputs, built atomically and locked,
recorded with their code lineage, and a network task's work run in a child process on a GPU slot.

A library a project uses: it imports no module of the project and holds none of its data. The project tells
it what it needs (:func:`task_engine.code_versions.configure`: its packages, its tasks package and the file of
their versions; a :class:`task_engine.torchrun.TorchrunJob` for a data-parallel run).
"""
