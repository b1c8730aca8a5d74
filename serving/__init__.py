"""Using a trained model outside the pipeline: export it as a self-contained bundle, embed and index a gallery
of images and texts, search it from the command line (``crossmodal``), a JSON API or a web page.

Layering: this package reads models/ and data_recipes/ only, so a bundle loads (and a gallery is indexed)
without the pipeline or a run tree; the pipeline imports it to export and index the headline model.
"""
