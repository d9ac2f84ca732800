//! Memory keys: list and interleaved layouts and their translation.
