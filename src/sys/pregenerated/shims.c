#include "wrapper.h"

// Static wrappers

void ibv_wr_atomic_cmp_swp__extern(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint64_t compare, uint64_t swap) { ibv_wr_atomic_cmp_swp(qp, rkey, remote_addr, compare, swap); }
void ibv_wr_atomic_fetch_add__extern(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, uint64_t add) { ibv_wr_atomic_fetch_add(qp, rkey, remote_addr, add); }
void ibv_wr_bind_mw__extern(struct ibv_qp_ex *qp, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *bind_info) { ibv_wr_bind_mw(qp, mw, rkey, bind_info); }
void ibv_wr_local_inv__extern(struct ibv_qp_ex *qp, uint32_t invalidate_rkey) { ibv_wr_local_inv(qp, invalidate_rkey); }
void ibv_wr_rdma_read__extern(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr) { ibv_wr_rdma_read(qp, rkey, remote_addr); }
void ibv_wr_rdma_write__extern(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr) { ibv_wr_rdma_write(qp, rkey, remote_addr); }
void ibv_wr_rdma_write_imm__extern(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, __be32 imm_data) { ibv_wr_rdma_write_imm(qp, rkey, remote_addr, imm_data); }
void ibv_wr_send__extern(struct ibv_qp_ex *qp) { ibv_wr_send(qp); }
void ibv_wr_send_imm__extern(struct ibv_qp_ex *qp, __be32 imm_data) { ibv_wr_send_imm(qp, imm_data); }
void ibv_wr_send_inv__extern(struct ibv_qp_ex *qp, uint32_t invalidate_rkey) { ibv_wr_send_inv(qp, invalidate_rkey); }
void ibv_wr_send_tso__extern(struct ibv_qp_ex *qp, void *hdr, uint16_t hdr_sz, uint16_t mss) { ibv_wr_send_tso(qp, hdr, hdr_sz, mss); }
void ibv_wr_set_ud_addr__extern(struct ibv_qp_ex *qp, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey) { ibv_wr_set_ud_addr(qp, ah, remote_qpn, remote_qkey); }
void ibv_wr_set_xrc_srqn__extern(struct ibv_qp_ex *qp, uint32_t remote_srqn) { ibv_wr_set_xrc_srqn(qp, remote_srqn); }
void ibv_wr_set_inline_data__extern(struct ibv_qp_ex *qp, void *addr, size_t length) { ibv_wr_set_inline_data(qp, addr, length); }
void ibv_wr_set_inline_data_list__extern(struct ibv_qp_ex *qp, size_t num_buf, const struct ibv_data_buf *buf_list) { ibv_wr_set_inline_data_list(qp, num_buf, buf_list); }
void ibv_wr_set_sge__extern(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length) { ibv_wr_set_sge(qp, lkey, addr, length); }
void ibv_wr_set_sge_list__extern(struct ibv_qp_ex *qp, size_t num_sge, const struct ibv_sge *sg_list) { ibv_wr_set_sge_list(qp, num_sge, sg_list); }
void ibv_wr_start__extern(struct ibv_qp_ex *qp) { ibv_wr_start(qp); }
int ibv_wr_complete__extern(struct ibv_qp_ex *qp) { return ibv_wr_complete(qp); }
void ibv_wr_abort__extern(struct ibv_qp_ex *qp) { ibv_wr_abort(qp); }
void ibv_wr_atomic_write__extern(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, const void *atomic_wr) { ibv_wr_atomic_write(qp, rkey, remote_addr, atomic_wr); }
struct ibv_cq * ibv_cq_ex_to_cq__extern(struct ibv_cq_ex *cq) { return ibv_cq_ex_to_cq(cq); }
int ibv_start_poll__extern(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr) { return ibv_start_poll(cq, attr); }
int ibv_next_poll__extern(struct ibv_cq_ex *cq) { return ibv_next_poll(cq); }
void ibv_end_poll__extern(struct ibv_cq_ex *cq) { ibv_end_poll(cq); }
enum ibv_wc_opcode ibv_wc_read_opcode__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_opcode(cq); }
uint32_t ibv_wc_read_vendor_err__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_vendor_err(cq); }
uint32_t ibv_wc_read_byte_len__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_byte_len(cq); }
__be32 ibv_wc_read_imm_data__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_imm_data(cq); }
uint32_t ibv_wc_read_invalidated_rkey__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_invalidated_rkey(cq); }
uint32_t ibv_wc_read_qp_num__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_qp_num(cq); }
uint32_t ibv_wc_read_src_qp__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_src_qp(cq); }
unsigned int ibv_wc_read_wc_flags__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_wc_flags(cq); }
uint32_t ibv_wc_read_slid__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_slid(cq); }
uint8_t ibv_wc_read_sl__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_sl(cq); }
uint8_t ibv_wc_read_dlid_path_bits__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_dlid_path_bits(cq); }
uint64_t ibv_wc_read_completion_ts__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_completion_ts(cq); }
uint64_t ibv_wc_read_completion_wallclock_ns__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_completion_wallclock_ns(cq); }
uint16_t ibv_wc_read_cvlan__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_cvlan(cq); }
uint32_t ibv_wc_read_flow_tag__extern(struct ibv_cq_ex *cq) { return ibv_wc_read_flow_tag(cq); }
void ibv_wc_read_tm_info__extern(struct ibv_cq_ex *cq, struct ibv_wc_tm_info *tm_info) { ibv_wc_read_tm_info(cq, tm_info); }
int ibv_post_wq_recv__extern(struct ibv_wq *wq, struct ibv_recv_wr *recv_wr, struct ibv_recv_wr **bad_recv_wr) { return ibv_post_wq_recv(wq, recv_wr, bad_recv_wr); }
int ___ibv_query_port__extern(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr) { return ___ibv_query_port(context, port_num, port_attr); }
int ibv_query_gid_ex__extern(struct ibv_context *context, uint32_t port_num, uint32_t gid_index, struct ibv_gid_entry *entry, uint32_t flags) { return ibv_query_gid_ex(context, port_num, gid_index, entry, flags); }
ssize_t ibv_query_gid_table__extern(struct ibv_context *context, struct ibv_gid_entry *entries, size_t max_entries, uint32_t flags) { return ibv_query_gid_table(context, entries, max_entries, flags); }
struct ibv_flow * ibv_create_flow__extern(struct ibv_qp *qp, struct ibv_flow_attr *flow) { return ibv_create_flow(qp, flow); }
int ibv_destroy_flow__extern(struct ibv_flow *flow_id) { return ibv_destroy_flow(flow_id); }
struct ibv_flow_action * ibv_create_flow_action_esp__extern(struct ibv_context *ctx, struct ibv_flow_action_esp_attr *esp) { return ibv_create_flow_action_esp(ctx, esp); }
int ibv_modify_flow_action_esp__extern(struct ibv_flow_action *action, struct ibv_flow_action_esp_attr *esp) { return ibv_modify_flow_action_esp(action, esp); }
int ibv_destroy_flow_action__extern(struct ibv_flow_action *action) { return ibv_destroy_flow_action(action); }
struct ibv_xrcd * ibv_open_xrcd__extern(struct ibv_context *context, struct ibv_xrcd_init_attr *xrcd_init_attr) { return ibv_open_xrcd(context, xrcd_init_attr); }
int ibv_close_xrcd__extern(struct ibv_xrcd *xrcd) { return ibv_close_xrcd(xrcd); }
struct ibv_mr * __ibv_reg_mr__extern(struct ibv_pd *pd, void *addr, size_t length, unsigned int access, int is_access_const) { return __ibv_reg_mr(pd, addr, length, access, is_access_const); }
struct ibv_mr * __ibv_reg_mr_iova__extern(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access, int is_access_const) { return __ibv_reg_mr_iova(pd, addr, length, iova, access, is_access_const); }
struct ibv_mw * ibv_alloc_mw__extern(struct ibv_pd *pd, enum ibv_mw_type type) { return ibv_alloc_mw(pd, type); }
int ibv_dealloc_mw__extern(struct ibv_mw *mw) { return ibv_dealloc_mw(mw); }
uint32_t ibv_inc_rkey__extern(uint32_t rkey) { return ibv_inc_rkey(rkey); }
int ibv_bind_mw__extern(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind) { return ibv_bind_mw(qp, mw, mw_bind); }
int ibv_advise_mr__extern(struct ibv_pd *pd, enum ib_uverbs_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge) { return ibv_advise_mr(pd, advice, flags, sg_list, num_sge); }
struct ibv_dm * ibv_alloc_dm__extern(struct ibv_context *context, struct ibv_alloc_dm_attr *attr) { return ibv_alloc_dm(context, attr); }
int ibv_free_dm__extern(struct ibv_dm *dm) { return ibv_free_dm(dm); }
int ibv_memcpy_to_dm__extern(struct ibv_dm *dm, uint64_t dm_offset, const void *host_addr, size_t length) { return ibv_memcpy_to_dm(dm, dm_offset, host_addr, length); }
int ibv_memcpy_from_dm__extern(void *host_addr, struct ibv_dm *dm, uint64_t dm_offset, size_t length) { return ibv_memcpy_from_dm(host_addr, dm, dm_offset, length); }
struct ibv_mr * ibv_alloc_null_mr__extern(struct ibv_pd *pd) { return ibv_alloc_null_mr(pd); }
struct ibv_mr * ibv_reg_dm_mr__extern(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t dm_offset, size_t length, unsigned int access) { return ibv_reg_dm_mr(pd, dm, dm_offset, length, access); }
struct ibv_cq_ex * ibv_create_cq_ex__extern(struct ibv_context *context, struct ibv_cq_init_attr_ex *cq_attr) { return ibv_create_cq_ex(context, cq_attr); }
int ibv_poll_cq__extern(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc) { return ibv_poll_cq(cq, num_entries, wc); }
int ibv_req_notify_cq__extern(struct ibv_cq *cq, int solicited_only) { return ibv_req_notify_cq(cq, solicited_only); }
int ibv_modify_cq__extern(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr) { return ibv_modify_cq(cq, attr); }
struct ibv_srq * ibv_create_srq_ex__extern(struct ibv_context *context, struct ibv_srq_init_attr_ex *srq_init_attr_ex) { return ibv_create_srq_ex(context, srq_init_attr_ex); }
int ibv_get_srq_num__extern(struct ibv_srq *srq, uint32_t *srq_num) { return ibv_get_srq_num(srq, srq_num); }
int ibv_post_srq_recv__extern(struct ibv_srq *srq, struct ibv_recv_wr *recv_wr, struct ibv_recv_wr **bad_recv_wr) { return ibv_post_srq_recv(srq, recv_wr, bad_recv_wr); }
int ibv_post_srq_ops__extern(struct ibv_srq *srq, struct ibv_ops_wr *op, struct ibv_ops_wr **bad_op) { return ibv_post_srq_ops(srq, op, bad_op); }
struct ibv_qp * ibv_create_qp_ex__extern(struct ibv_context *context, struct ibv_qp_init_attr_ex *qp_init_attr_ex) { return ibv_create_qp_ex(context, qp_init_attr_ex); }
struct ibv_td * ibv_alloc_td__extern(struct ibv_context *context, struct ibv_td_init_attr *init_attr) { return ibv_alloc_td(context, init_attr); }
int ibv_dealloc_td__extern(struct ibv_td *td) { return ibv_dealloc_td(td); }
struct ibv_pd * ibv_alloc_parent_domain__extern(struct ibv_context *context, struct ibv_parent_domain_init_attr *attr) { return ibv_alloc_parent_domain(context, attr); }
int ibv_query_rt_values_ex__extern(struct ibv_context *context, struct ibv_values_ex *values) { return ibv_query_rt_values_ex(context, values); }
int ibv_query_device_ex__extern(struct ibv_context *context, const struct ibv_query_device_ex_input *input, struct ibv_device_attr_ex *attr) { return ibv_query_device_ex(context, input, attr); }
struct ibv_qp * ibv_open_qp__extern(struct ibv_context *context, struct ibv_qp_open_attr *qp_open_attr) { return ibv_open_qp(context, qp_open_attr); }
int ibv_modify_qp_rate_limit__extern(struct ibv_qp *qp, struct ibv_qp_rate_limit_attr *attr) { return ibv_modify_qp_rate_limit(qp, attr); }
struct ibv_wq * ibv_create_wq__extern(struct ibv_context *context, struct ibv_wq_init_attr *wq_init_attr) { return ibv_create_wq(context, wq_init_attr); }
int ibv_modify_wq__extern(struct ibv_wq *wq, struct ibv_wq_attr *wq_attr) { return ibv_modify_wq(wq, wq_attr); }
int ibv_destroy_wq__extern(struct ibv_wq *wq) { return ibv_destroy_wq(wq); }
struct ibv_rwq_ind_table * ibv_create_rwq_ind_table__extern(struct ibv_context *context, struct ibv_rwq_ind_table_init_attr *init_attr) { return ibv_create_rwq_ind_table(context, init_attr); }
int ibv_destroy_rwq_ind_table__extern(struct ibv_rwq_ind_table *rwq_ind_table) { return ibv_destroy_rwq_ind_table(rwq_ind_table); }
int ibv_post_send__extern(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) { return ibv_post_send(qp, wr, bad_wr); }
int ibv_post_recv__extern(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr) { return ibv_post_recv(qp, wr, bad_wr); }
int ibv_is_qpt_supported__extern(uint32_t caps, enum ibv_qp_type qpt) { return ibv_is_qpt_supported(caps, qpt); }
struct ibv_counters * ibv_create_counters__extern(struct ibv_context *context, struct ibv_counters_init_attr *init_attr) { return ibv_create_counters(context, init_attr); }
int ibv_destroy_counters__extern(struct ibv_counters *counters) { return ibv_destroy_counters(counters); }
int ibv_attach_counters_point_flow__extern(struct ibv_counters *counters, struct ibv_counter_attach_attr *attr, struct ibv_flow *flow) { return ibv_attach_counters_point_flow(counters, attr, flow); }
int ibv_read_counters__extern(struct ibv_counters *counters, uint64_t *counters_value, uint32_t ncounters, uint32_t flags) { return ibv_read_counters(counters, counters_value, ncounters, flags); }
uint16_t ibv_flow_label_to_udp_sport__extern(uint32_t fl) { return ibv_flow_label_to_udp_sport(fl); }
void mlx5dv_wr_set_dc_addr__extern(struct mlx5dv_qp_ex *mqp, struct ibv_ah *ah, uint32_t remote_dctn, uint64_t remote_dc_key) { mlx5dv_wr_set_dc_addr(mqp, ah, remote_dctn, remote_dc_key); }
void mlx5dv_wr_set_dc_addr_stream__extern(struct mlx5dv_qp_ex *mqp, struct ibv_ah *ah, uint32_t remote_dctn, uint64_t remote_dc_key, uint16_t stream_id) { mlx5dv_wr_set_dc_addr_stream(mqp, ah, remote_dctn, remote_dc_key, stream_id); }
void mlx5dv_wr_mr_interleaved__extern(struct mlx5dv_qp_ex *mqp, struct mlx5dv_mkey *mkey, uint32_t access_flags, uint32_t repeat_count, uint16_t num_interleaved, struct mlx5dv_mr_interleaved *data) { mlx5dv_wr_mr_interleaved(mqp, mkey, access_flags, repeat_count, num_interleaved, data); }
void mlx5dv_wr_mr_list__extern(struct mlx5dv_qp_ex *mqp, struct mlx5dv_mkey *mkey, uint32_t access_flags, uint16_t num_sges, struct ibv_sge *sge) { mlx5dv_wr_mr_list(mqp, mkey, access_flags, num_sges, sge); }
void mlx5dv_wr_mkey_configure__extern(struct mlx5dv_qp_ex *mqp, struct mlx5dv_mkey *mkey, uint8_t num_setters, struct mlx5dv_mkey_conf_attr *attr) { mlx5dv_wr_mkey_configure(mqp, mkey, num_setters, attr); }
void mlx5dv_wr_set_mkey_access_flags__extern(struct mlx5dv_qp_ex *mqp, uint32_t access_flags) { mlx5dv_wr_set_mkey_access_flags(mqp, access_flags); }
void mlx5dv_wr_set_mkey_layout_list__extern(struct mlx5dv_qp_ex *mqp, uint16_t num_sges, const struct ibv_sge *sge) { mlx5dv_wr_set_mkey_layout_list(mqp, num_sges, sge); }
void mlx5dv_wr_set_mkey_layout_interleaved__extern(struct mlx5dv_qp_ex *mqp, uint32_t repeat_count, uint16_t num_interleaved, const struct mlx5dv_mr_interleaved *data) { mlx5dv_wr_set_mkey_layout_interleaved(mqp, repeat_count, num_interleaved, data); }
void mlx5dv_wr_set_mkey_sig_block__extern(struct mlx5dv_qp_ex *mqp, const struct mlx5dv_sig_block_attr *attr) { mlx5dv_wr_set_mkey_sig_block(mqp, attr); }
void mlx5dv_wr_set_mkey_crypto__extern(struct mlx5dv_qp_ex *mqp, const struct mlx5dv_crypto_attr *attr) { mlx5dv_wr_set_mkey_crypto(mqp, attr); }
void mlx5dv_wr_memcpy__extern(struct mlx5dv_qp_ex *mqp, uint32_t dest_lkey, uint64_t dest_addr, uint32_t src_lkey, uint64_t src_addr, size_t length) { mlx5dv_wr_memcpy(mqp, dest_lkey, dest_addr, src_lkey, src_addr, length); }
int mlx5dv_mkey_check__extern(struct mlx5dv_mkey *mkey, struct mlx5dv_mkey_err *err_info) { return mlx5dv_mkey_check(mkey, err_info); }
void mlx5dv_wr_raw_wqe__extern(struct mlx5dv_qp_ex *mqp, const void *wqe) { mlx5dv_wr_raw_wqe(mqp, wqe); }
uint8_t mlx5dv_get_cqe_owner__extern(struct mlx5_cqe64 *cqe) { return mlx5dv_get_cqe_owner(cqe); }
void mlx5dv_set_cqe_owner__extern(struct mlx5_cqe64 *cqe, uint8_t val) { mlx5dv_set_cqe_owner(cqe, val); }
uint8_t mlx5dv_get_cqe_se__extern(struct mlx5_cqe64 *cqe) { return mlx5dv_get_cqe_se(cqe); }
uint8_t mlx5dv_get_cqe_format__extern(struct mlx5_cqe64 *cqe) { return mlx5dv_get_cqe_format(cqe); }
uint8_t mlx5dv_get_cqe_opcode__extern(struct mlx5_cqe64 *cqe) { return mlx5dv_get_cqe_opcode(cqe); }
void mlx5dv_set_ctrl_seg__extern(struct mlx5_wqe_ctrl_seg *seg, uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qp_num, uint8_t fm_ce_se, uint8_t ds, uint8_t signature, uint32_t imm) { mlx5dv_set_ctrl_seg(seg, pi, opcode, opmod, qp_num, fm_ce_se, ds, signature, imm); }
void mlx5dv_set_dgram_seg__extern(struct mlx5_wqe_datagram_seg *seg, uint64_t key, uint32_t dqp_dct, uint8_t ext, uint8_t stat_rate_sl, uint8_t fl_mlid, uint16_t rlid, uint8_t *rmac, uint8_t tclass, uint8_t hop_limit, uint32_t grh_gid_fi, uint8_t *rgid) { mlx5dv_set_dgram_seg(seg, key, dqp_dct, ext, stat_rate_sl, fl_mlid, rlid, rmac, tclass, hop_limit, grh_gid_fi, rgid); }
void mlx5dv_set_data_seg__extern(struct mlx5_wqe_data_seg *seg, uint32_t length, uint32_t lkey, uintptr_t address) { mlx5dv_set_data_seg(seg, length, lkey, address); }
void mlx5dv_set_eth_seg__extern(struct mlx5_wqe_eth_seg *seg, uint8_t cs_flags, uint16_t mss, uint16_t inline_hdr_sz, uint8_t *inline_hdr_start) { mlx5dv_set_eth_seg(seg, cs_flags, mss, inline_hdr_sz, inline_hdr_start); }
uint64_t mlx5dv_ts_to_ns__extern(struct mlx5dv_clock_info *clock_info, uint64_t device_timestamp) { return mlx5dv_ts_to_ns(clock_info, device_timestamp); }
int mlx5dv_query_port__extern(struct ibv_context *context, uint32_t port_num, struct mlx5_ib_uapi_query_port *info) { return mlx5dv_query_port(context, port_num, info); }
