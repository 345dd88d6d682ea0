# The compiled kernel's C types, for the modules that run operators inside it
# (`_machines.pyx`); `_kernel.pyx` holds their code and their documentation.

cdef class Channel:
    cdef public str name, src, dst
    cdef public object q, credits  # deques: (visible_time, payload, stop); credit times
    cdef public long long cap, outstanding, high_water, count, elem_bytes
    cdef public bint closed, reserved
    cdef public Ctx recv_waiter, send_waiter
    cdef public object log, looks, looked_at


cdef class Ctx:
    cdef public str name, op
    cdef public object gen
    cdef public Machine machine  # the operator as a compiled state machine (else `gen`)
    cdef long long clock  # `t`, its clock
    cdef public long long busy, fired, mem_ops, last_mem
    cdef public bint done
    cdef public list outs
    cdef public object value, blocked, selecting, spans, trace
    cdef int _work(self, long long start, long long cycles, str label) except -1


cdef class Machine:
    cdef int resume(self, Kernel k, Ctx ctx) except -1


cdef class Kernel:
    cdef public list contexts, channels, heap
    cdef public object ready, memory, progress
    cdef public long long seq, hop, steps
    cdef object _max_cycles
    cdef bint _limited  # max_cycles is set
    cdef long long _limit  # its value
    cdef int _put(self, Ctx ctx, Channel ch, payload, stop, long long at) except -1
    cdef int _release(self, Channel ch, long long t) except -1
    cdef int _wake(self, Ctx ctx) except -1
    cdef int _step(self, Ctx ctx) except -1
    cdef int _finish(self, Ctx ctx) except -1
    cdef int _try_select(self, Ctx ctx) except -1
    cdef int _finish_select(self, Ctx ctx) except -1
    cdef object _first(self, Ctx ctx, tuple op, now)
    cdef object peek(self, Ctx ctx, Channel ch, bint take, tuple op)
    cdef list peek_all(self, Ctx ctx, list chans, tuple op)
    cdef int release_all(self, Ctx ctx, list chans) except -1
    cdef bint send(self, Ctx ctx, Channel ch, payload, stop) except -1
    cdef bint send_all(self, Ctx ctx, list chans, payload, stop) except -1
    cdef int select(self, Ctx ctx, list chans) except -1

