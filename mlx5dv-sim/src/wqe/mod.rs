//! WQE parsing and validation.
