// skeleton tests (being written)
