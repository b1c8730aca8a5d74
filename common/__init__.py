"""The bottom layer: what every package of the project may import and what imports nothing of the project —
atomic file writes (``common.files``), the one tokenizer (``common.tokenizer``) that validation, Doc2Vec,
the word vectors, the GRU and a served model all read text with, and the process-independent string hash
gensim seeds its vectors with (``common.hashing``)."""
