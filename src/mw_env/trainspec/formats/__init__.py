"""File formats read without their libraries: the Parquet footer and tags dictionary, Protocol Buffers/Thrift varints, the SentencePiece model's piece count."""
