"""One behavior (a generator) per operator, keyed by the same names as `stepc.ops.OPS`."""

from stepc.sim.behaviors import compute, memory, routing, shape, source

BEHAVIORS = {
    "LinearOffChipLoad": memory.linear_load,
    "LinearOffChipStore": memory.linear_store,
    "RandomOffChipLoad": memory.random_load,
    "RandomOffChipStore": memory.random_store,
    "Bufferize": memory.bufferize,
    "Streamify": memory.streamify,
    "Partition": routing.partition,
    "Reassemble": routing.reassemble,
    "EagerMerge": routing.eager_merge,
    "Parallelize": routing.parallelize,
    "Broadcast": routing.broadcast,
    "Map": compute.map_,
    "Accum": compute.accum,
    "Scan": compute.scan,
    "FlatMap": compute.flatmap,
    "Flatten": shape.flatten,
    "Reshape": shape.reshape,
    "Promote": shape.promote,
    "Expand": shape.expand,
    "Repeat": shape.repeat,
    "Zip": shape.zip_,
    "External": source.external,
    "SelectGen": source.select_gen,
    "MetadataGen": source.metadata_gen,
    "Sink": source.sink,
}
