/*
 * The C header of librdmacm that the `rdma-cm` feature of the `mlx5dv` crate
 * binds (rdma_cm(7)): event channels, CM ids, address and route
 * resolution, listen/accept/connect/disconnect. bindgen reads this file into
 * a module of its own; the verbs types it names come from wrapper.h's
 * bindings.
 */
#include <rdma/rdma_cma.h>
