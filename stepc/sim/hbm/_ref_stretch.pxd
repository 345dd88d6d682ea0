# The `ref` pool's closed form over a stretch of cycles (`_ref_stretch.pyx`), for `_ref_pool`.

cdef class Pattern:
    cdef long long p, step, width, n
    cdef long long* chan  # per request (row t, port i) of a period, at [t * width + i]
    cdef long long* rank  # ... its rank among its channel's visits in the period
    cdef long long* q  # per channel: visits per period
    cdef long long* first  # ... where its visits' running maxima start in `ahead`
    cdef long long* ahead  # per visit r: max over visits r' <= r of (row + 1 - r' * II)
    cdef long long* before  # [t * n + j]: visits to channel j in rows < t (t = 0..p)


cdef class Stretches:
    cdef long long n, ii
    cdef dict patterns  # width -> Pattern
    cdef long long* free_rel
    cdef long long* last
    cdef long long period(self, long long width)
    cdef Pattern pattern(self, long long width)
    cdef long long serve(self, long long a, long long length, Py_ssize_t* live,
                         Py_ssize_t width, long long offset, long long* latest,
                         long long* earliest, bint want_first, long long* fp,
                         long long* cp) except -1
