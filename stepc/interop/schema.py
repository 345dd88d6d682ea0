"""The reference toolchain's `step_perf_ir` wire format (ProgramGraph, Operation and the op
messages), described here field by field and built into protobuf message classes at import
time: no generated code, no protoc.

Field numbers follow the schema the reference frontend serialised against. Entries marked
GUESSED are those of newer schema revisions whose numbers are not published; graphs that
use them decode under the numbers given here (the reference corpus was written with them).
"""

from __future__ import annotations

from typing import Any, TypeAlias

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "step_perf_ir"
_F = descriptor_pb2.FieldDescriptorProto

# type codes of the table below
U32, U64, I32, BOOL, STR = "u32", "u64", "i32", "bool", "str"
_SCALARS = {U32: _F.TYPE_UINT32, U64: _F.TYPE_UINT64, I32: _F.TYPE_INT32, BOOL: _F.TYPE_BOOL,
            STR: _F.TYPE_STRING}

# Each message: a list of fields (name, number, type, mode). type is a scalar code or a
# message name; mode is "" (singular), "rep" (repeated), "opt" (proto3 optional) or
# "oneof:NAME" (a member of the oneof NAME).
_EMPTY = ()
MESSAGES: dict[str, tuple] = {
    # datatype.proto
    "DataType": (("f16", 1, "F16", "oneof:type"), ("f32", 2, "F32", "oneof:type"),
                 ("multi_hot", 3, "MultiHot", "oneof:type"), ("index", 4, "Index", "oneof:type"),
                 ("buffer", 5, "Buffer", "oneof:type"),
                 ("scalar_u64", 6, "ScalarU64", "oneof:type"),
                 ("scalar_bool", 7, "ScalarBool", "oneof:type"),
                 ("u64", 8, "U64", "oneof:type"),                 # GUESSED
                 ("bool", 9, "Bool", "oneof:type"),               # GUESSED
                 ("scalar_i64", 10, "ScalarI64", "oneof:type")),  # GUESSED
    "Buffer": (("f16", 1, "F16", "oneof:type"), ("f32", 2, "F32", "oneof:type")),
    **{m: _EMPTY for m in ("ScalarU64", "ScalarBool", "F16", "F32", "MultiHot", "Index", "U64",
                           "Bool", "ScalarI64")},
    # func.proto
    "ElemtoElemFunc": (("matmul", 1, "Matmul", "oneof:elem_elem_fn"),
                       ("mul", 2, "Mul", "oneof:elem_elem_fn"),
                       ("silu", 3, "Silu", "oneof:elem_elem_fn"),
                       ("add", 4, "Add", "oneof:elem_elem_fn"),
                       ("dyn_matmul", 5, "DynMatmul", "oneof:elem_elem_fn"),
                       ("div", 6, "Div", "oneof:elem_elem_fn"),                    # GUESSED
                       ("row_wise_sum", 7, "RowWiseSum", "oneof:elem_elem_fn"),    # GUESSED
                       ("exp", 8, "Exp", "oneof:elem_elem_fn"),                    # GUESSED
                       ("set_offset", 9, "SetOffset", "oneof:elem_elem_fn"),      # GUESSED
                       ("row_wise_append", 10, "RowWiseAppend", "oneof:elem_elem_fn"),
                       ("cache_write_addr_gen", 11, "CacheWriteAddrGen",
                        "oneof:elem_elem_fn")),                                     # GUESSED
    "MapAccumFunc": (("matmul", 1, "Matmul", "oneof:map_accum_fn"),
                     ("dyn_matmul", 2, "DynMatmul", "oneof:map_accum_fn")),
    "InitFunc": (("zero", 1, "Zero", "oneof:init_fn"), ("empty", 2, "Empty", "oneof:init_fn")),
    "AccumFunc": (("matmul", 1, "Matmul", "oneof:accum_fn"), ("mul", 2, "Mul", "oneof:accum_fn"),
                  ("add", 3, "Add", "oneof:accum_fn"),
                  ("retile_col", 4, "RetileCol", "oneof:accum_fn"),
                  ("retile_row", 5, "RetileRow", "oneof:accum_fn"),
                  ("signal_req_all_read", 6, "SignalReqAllRead", "oneof:accum_fn")),  # GUESSED
    "Matmul": (("weight_transposed", 1, BOOL, ""),),
    "DynMatmul": (("weight_transposed", 1, BOOL, ""),),
    "CacheWriteAddrGen": (("offset_per_idx", 1, U64, ""),),
    **{m: _EMPTY for m in ("Zero", "Empty", "Mul", "Add", "Silu", "RetileCol", "RetileRow",
                           "Div", "RowWiseSum", "Exp", "SetOffset", "RowWiseAppend",
                           "SignalReqAllRead")},
    # ops.proto
    "Bufferize": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"), ("rank", 3, U32, ""),
                  ("dtype", 4, "DataType", "")),
    "Streamify": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                  ("repeat_factor", 3, U32, "rep"), ("rank", 4, U32, ""),
                  ("dtype", 5, "DataType", "")),
    "DynStreamify": (("input_id", 1, U32, ""), ("input_stream_idx", 2, U32, "opt"),
                     ("ref_id", 3, U32, ""), ("ref_stream_idx", 4, U32, "opt"),
                     ("bufferized_rank", 5, U32, ""), ("repeat_rank", 6, U32, ""),
                     ("input_dtype", 7, "DataType", ""), ("ref_dtype", 8, "DataType", "")),
    "PrinterContext": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                       ("dtype", 3, "DataType", "")),
    "ConsumerContext": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                        ("dtype", 3, "DataType", "")),
    "BinaryMap": (("input_id1", 1, U32, ""), ("stream_idx1", 2, U32, "opt"),
                  ("input_id2", 3, U32, ""), ("stream_idx2", 4, U32, "opt"),
                  ("func", 5, "ElemtoElemFunc", ""), ("compute_bw", 6, U32, ""),
                  ("write_back_mu", 7, BOOL, ""), ("dtype_a", 8, "DataType", ""),
                  ("dtype_b", 9, "DataType", ""), ("dtype_out", 10, "DataType", "")),
    "UnaryMap": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                 ("func", 3, "ElemtoElemFunc", ""), ("compute_bw", 4, U32, ""),
                 ("write_back_mu", 5, BOOL, ""), ("dtype_a", 6, "DataType", ""),
                 ("dtype_b", 7, "DataType", "")),
    "BinaryMapAccum": (("input_id1", 1, U32, ""), ("stream_idx1", 2, U32, "opt"),
                       ("input_id2", 3, U32, ""), ("stream_idx2", 4, U32, "opt"),
                       ("func", 5, "MapAccumFunc", ""), ("init_func", 6, "InitFunc", ""),
                       ("tile_row", 7, U32, ""), ("tile_col", 8, U32, ""), ("rank", 9, U32, ""),
                       ("compute_bw", 10, U32, ""), ("write_back_mu", 11, BOOL, ""),
                       ("dtype_a", 12, "DataType", ""), ("dtype_b", 13, "DataType", "")),
    "OffChipLoad": (("tensor_shape_tiled", 1, U32, "rep"), ("stride", 2, U32, "rep"),
                    ("out_shape_tiled", 3, U32, "rep"), ("npy_path", 4, STR, "opt"),
                    ("tile_row", 5, U32, ""), ("tile_col", 6, U32, ""), ("n_byte", 7, U32, ""),
                    ("dtype", 8, "DataType", ""), ("par_dispatch", 9, U32, "")),
    "DynOffChipLoad": (("ref_id", 1, U32, ""), ("ref_stream_idx", 2, U32, "opt"),
                       ("tensor_shape_tiled", 3, U32, "rep"), ("stride", 4, U32, "rep"),
                       ("out_shape_tiled", 5, U32, "rep"), ("npy_path", 6, STR, "opt"),
                       ("tile_row", 7, U32, ""), ("tile_col", 8, U32, ""),
                       ("n_byte", 9, U32, ""), ("dtype", 10, "DataType", ""),
                       ("ref_dtype", 11, "DataType", ""), ("par_dispatch", 12, U32, "")),
    "MetadataGen": (("npy_path", 1, STR, ""), ("dtype", 2, "DataType", "")),
    "ExpertAddrGen": (("input_id", 1, U32, ""), ("input_stream_idx", 2, U32, "opt"),
                      ("num_tile_per_expert", 3, U32, ""), ("expert_addr_base", 4, U32, ""),
                      ("dtype", 5, "DataType", "")),
    "CacheReadAddrGen": (("idx_id", 1, U32, ""), ("idx_stream_idx", 2, U32, "opt"),
                         ("seq_len_id", 3, U32, ""), ("seq_len_stream_idx", 4, U32, "opt"),
                         ("offset_per_idx", 5, U64, "")),
    "FilterLastTile": (("seq_len_id", 1, U32, ""), ("seq_len_stream_idx", 2, U32, "opt")),
    "RandomOffChipLoad": (("raddr_id", 1, U32, ""), ("raddr_stream_idx", 2, U32, "opt"),
                          ("tensor_shape_tiled", 3, U32, "rep"), ("npy_path", 4, STR, "opt"),
                          ("tile_row", 5, U32, ""), ("tile_col", 6, U32, ""),
                          ("n_byte", 7, U32, ""), ("base_addr_byte", 8, U32, ""),
                          ("par_dispatch", 9, U32, ""), ("dtype", 10, "DataType", "")),
    "RandomOffChipStore": (("waddr_id", 1, U32, ""), ("waddr_stream_idx", 2, U32, "opt"),
                           ("wdata_id", 3, U32, ""), ("wdata_stream_idx", 4, U32, "opt"),
                           ("tensor_shape_tiled", 5, U32, "rep"), ("npy_path", 6, STR, "opt"),
                           ("tile_row", 7, U32, ""), ("tile_col", 8, U32, ""),
                           ("n_byte", 9, U32, ""), ("base_addr_byte", 10, U32, ""),
                           ("par_dispatch", 11, U32, ""), ("ack_based_on_waddr", 12, BOOL, ""),
                           ("wdata_dtype", 13, "DataType", "")),
    "OffChipStore": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                     ("tensor_shape_tiled", 3, U32, "rep"), ("store_path", 4, STR, "opt"),
                     ("tile_row", 5, U32, ""), ("tile_col", 6, U32, ""),
                     ("dtype", 7, "DataType", ""), ("par_dispatch", 8, U32, "")),
    "ExpandRef": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"), ("ref_id", 3, U32, ""),
                  ("ref_stream_idx", 4, U32, "opt"), ("expand_rank", 5, U32, ""),
                  ("dtype", 6, "DataType", ""), ("ref_dtype", 7, "DataType", "")),
    "RepeatStatic": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                     ("repeat_factor", 3, U32, ""), ("dtype", 4, "DataType", "")),
    "Broadcast": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                  ("num_consumers", 3, U32, ""), ("dtype", 4, "DataType", "")),
    "FlatPartition": (("input_id", 1, U32, ""), ("control_id", 2, U32, ""),
                      ("input_stream_idx", 3, U32, "opt"), ("control_stream_idx", 4, U32, "opt"),
                      ("partition_rank", 5, U32, ""), ("num_consumers", 6, U32, ""),
                      ("input_dtype", 7, "DataType", ""), ("control_dtype", 8, "DataType", ""),
                      ("switch_cycles", 9, U32, "rep"), ("write_back_mu", 10, BOOL, "")),
    "Parallelize": (("input_id", 1, U32, ""), ("input_stream_idx", 2, U32, "opt"),
                    ("parallelize_rank", 3, U32, ""), ("num_consumers", 4, U32, ""),
                    ("input_dtype", 5, "DataType", ""), ("switch_cycles", 6, U32, "rep"),
                    ("write_back_mu", 7, BOOL, "")),
    "FlatReassemble": (("input_id_list", 1, U32, "rep"), ("input_stream_idx_list", 2, I32, "rep"),
                       ("control_id", 3, U32, ""), ("control_stream_idx", 4, U32, "opt"),
                       ("reassemble_rank", 5, U32, ""), ("input_dtype", 6, "DataType", ""),
                       ("control_dtype", 7, "DataType", ""), ("switch_cycles", 8, U32, "rep"),
                       ("write_back_mu", 9, BOOL, "")),
    "SelectGen": (("npy_path", 1, STR, ""), ("is_multihot", 2, BOOL, "")),
    "Promote": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                ("promote_rank", 3, U32, ""), ("dtype", 4, "DataType", "")),
    "Flatten": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"), ("min_rank", 3, U32, ""),
                ("max_rank", 4, U32, ""), ("dtype", 5, "DataType", "")),
    "Accum": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
              ("func", 3, "AccumFunc", ""), ("init_func", 4, "InitFunc", ""),
              ("tile_row", 5, U32, ""), ("tile_col", 6, U32, ""), ("rank", 7, U32, ""),
              ("compute_bw", 8, U32, ""), ("write_back_mu", 9, BOOL, ""),
              ("dtype_a", 10, "DataType", ""), ("dtype_b", 11, "DataType", "")),
    "Reshape": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                ("split_dim", 3, U32, ""), ("chunk_size", 4, U32, ""),
                ("dtype", 5, "DataType", ""), ("write_back_mu", 6, BOOL, ""),
                ("input_stream_rank", 7, U32, ""), ("add_outer_dim", 8, BOOL, ""),
                ("pad_func", 9, "InitFunc", "opt"), ("tile_row", 10, U32, "opt"),
                ("tile_col", 11, U32, "opt")),
    "RetileStreamify": (("input_id", 1, U32, ""), ("stream_idx", 2, U32, "opt"),
                        ("split_row", 3, BOOL, ""), ("filter_mask", 4, BOOL, ""),
                        ("dtype", 5, "DataType", "")),
    "EagerMerge": (("input_id_list", 1, U32, "rep"), ("input_stream_idx_list", 2, I32, "rep"),
                   ("input_rank", 3, U32, ""), ("dtype", 4, "DataType", "")),
}

# Fields of Operation in newer schema revisions (published numbers), which `stepc export`
# writes: each output's stream shape (a dim: a number, or a symbolic expression), the
# replication factor (0 means 1), and the group id (not written).
MESSAGES["DimShape"] = (("static", 1, U32, "oneof:type"), ("dynamic", 2, STR, "oneof:type"))
NEWER_OPERATION_FIELDS = (("group_id", 3, U32, ""), ("out_stream_shape", 4, "DimShape", "rep"),
                          ("parallel_factor", 48, U32, ""))
# stepc's own fields of Operation, in a range no schema revision uses: what the program sets
# that the format has no field for. Readers of the plain schema (the reference's) skip them
# as unknown fields. `stepc_fifo_depth`: the FIFO depth of each input, in the operation's
# input order (one value: every input; 0: the hardware's); `stepc_buffer_depth`: a random
# store's write buffer depth in tiles (0: 1).
STEPC_OPERATION_FIELDS = (("stepc_fifo_depth", 9001, U32, "rep"),
                          ("stepc_buffer_depth", 9002, U32, ""))
# stepc's own field of ProgramGraph: the ids of the operators in the order of the program's
# statements (`stepc export` writes it), which the import keeps (the order in which
# operators register their memory requests decides which are served first)
STEPC_GRAPH_FIELDS = (("stepc_statement_order", 9001, U32, "rep"),)

# Operation's op_type oneof: field name -> (number, message)
OP_TYPES: dict[str, tuple[int, str]] = {
    "binarymap": (10, "BinaryMap"), "unarymap": (11, "UnaryMap"),
    "off_chip_load": (12, "OffChipLoad"), "off_chip_store": (13, "OffChipStore"),
    "repeat_static": (14, "RepeatStatic"), "broadcast": (15, "Broadcast"),
    "flat_partition": (16, "FlatPartition"), "flat_reassemble": (17, "FlatReassemble"),
    "promote": (18, "Promote"), "binarymap_accum": (19, "BinaryMapAccum"),
    "accum": (20, "Accum"), "printer_context": (21, "PrinterContext"),
    "consumer_context": (22, "ConsumerContext"), "bufferize": (23, "Bufferize"),
    "streamify": (24, "Streamify"), "dyn_streamify": (25, "DynStreamify"),
    "select_gen": (26, "SelectGen"), "dyn_off_chip_load": (27, "DynOffChipLoad"),
    "flatten": (28, "Flatten"), "reshape": (29, "Reshape"),
    "retile_streamify": (30, "RetileStreamify"), "eager_merge": (31, "EagerMerge"),
    "metadata_gen": (32, "MetadataGen"), "random_off_chip_load": (33, "RandomOffChipLoad"),
    "random_off_chip_store": (34, "RandomOffChipStore"),
    "expert_addr_gen": (35, "ExpertAddrGen"), "parallelize": (36, "Parallelize"),
    "cache_read_addr_gen": (37, "CacheReadAddrGen"), "filter_last_tile": (38, "FilterLastTile"),
    "expand_ref": (39, "ExpandRef"),
}


def _message(name: str, fields) -> descriptor_pb2.DescriptorProto:
    msg = descriptor_pb2.DescriptorProto(name=name)
    oneofs: list[str] = []
    for fname, number, ftype, mode in fields:
        f = msg.field.add(name=fname, number=number)
        f.label = _F.LABEL_REPEATED if mode == "rep" else _F.LABEL_OPTIONAL
        if ftype in _SCALARS:
            f.type = _SCALARS[ftype]
            if mode == "rep":
                f.options.packed = True
        else:
            f.type, f.type_name = _F.TYPE_MESSAGE, f".{PACKAGE}.{ftype}"
        group = mode[6:] if mode.startswith("oneof:") else f"_{fname}" if mode == "opt" else ""
        if group:
            if group not in oneofs:
                oneofs.append(group)
                msg.oneof_decl.add(name=group)
            f.oneof_index = oneofs.index(group)
            f.proto3_optional = mode == "opt"
    # proto3 wants the synthetic oneofs of `optional` fields after the real ones
    return msg


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="stepc_step_perf_ir.proto", package=PACKAGE,
                                            syntax="proto3")
    messages = dict(MESSAGES)
    messages["Operation"] = (("name", 1, STR, ""), ("id", 2, U32, ""), *NEWER_OPERATION_FIELDS,
                             *STEPC_OPERATION_FIELDS,
                             *((f, n, m, "oneof:op_type") for f, (n, m) in OP_TYPES.items()))
    messages["ProgramGraph"] = (("name", 1, STR, ""), ("operators", 2, "Operation", "rep"),
                                *STEPC_GRAPH_FIELDS)
    for name, fields in messages.items():
        fd.message_type.append(_message(name, _ordered(fields)))
    return fd


def _ordered(fields):
    """Real oneof members first, so that synthetic oneofs of `optional` fields come last."""
    return sorted(fields, key=lambda f: not f[3].startswith("oneof:"))


def is_repeated(desc) -> bool:
    """Whether a field (its descriptor) is repeated, in every protobuf version."""
    return desc.is_repeated if hasattr(desc, "is_repeated") else \
        desc.label == desc.LABEL_REPEATED  # protobuf < 5


# A message of this schema: its class is built at import time from the tables above, so a
# type checker cannot know its fields (code reads them by the names the tables give).
WireMessage: TypeAlias = Any

_classes = message_factory.GetMessages([_file()], pool=descriptor_pool.DescriptorPool())
ProgramGraph: type[WireMessage] = _classes[f"{PACKAGE}.ProgramGraph"]
Operation: type[WireMessage] = _classes[f"{PACKAGE}.Operation"]
