//! The mlx5-specific parts of the API (`mlx5dv(7)`): device capabilities
//! (`mlx5dv_query_device(3)`).

mod caps;
pub use caps::*;
