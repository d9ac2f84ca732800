//! A software mlx5 device for the real libibverbs and libmlx5.

pub mod mkey;
pub mod wqe;
