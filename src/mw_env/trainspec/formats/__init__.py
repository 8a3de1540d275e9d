"""File formats read without their libraries: the Parquet footer and tags dictionary, compact Thrift (and its varint, protobuf's too), the SentencePiece model's piece count."""
