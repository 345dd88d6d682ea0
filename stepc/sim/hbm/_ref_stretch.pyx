"""The `ref` pool's service in closed form over a stretch of cycles in which the same ports
each issue one single-request message per cycle (`ref_periodic.py` states the same rules
with numpy): request i of a cycle goes to channel `o + i(i+1)/2 (mod n)` and the offset
grows by `J = L(L+1)/2` a cycle, so the channels repeat every `P = n / gcd(J, n)` cycles.
A channel starts its l-th request of the stretch at `l * II + max(free, max over l' <= l
of (a_l' - l' * II))` (a: arrival cycles); with arrivals repeating every period (q per
period), that running maximum is the first period's plus `D = P - q * II` a period when
D >= 0, else the first period's whole maximum. So a stretch costs its first and last
periods, whatever its length: a port's earliest start is among its first visits to each
channel, its latest and each channel's last among the last period's."""

from libc.stdlib cimport calloc
from libc.stdlib cimport free as cfree

cdef long long NONE = -(1LL << 60)  # below any running maximum


cdef long long _gcd(long long a, long long b):
    while b:
        a, b = b, a % b
    return a


cdef class Pattern:
    """One period of the channel pattern of `width` requests a cycle from offset 0."""

    def __cinit__(self, long long n, long long ii, long long width):
        cdef long long t, i, j, x, tri, r, base, total
        self.n, self.width = n, width
        self.step = width * (width + 1) // 2 % n
        self.p = n // _gcd(self.step, n)
        total = self.p * width
        self.chan = <long long*>calloc(total, sizeof(long long))
        self.rank = <long long*>calloc(total, sizeof(long long))
        self.q = <long long*>calloc(n, sizeof(long long))
        self.first = <long long*>calloc(n, sizeof(long long))
        self.ahead = <long long*>calloc(total, sizeof(long long))
        self.before = <long long*>calloc((self.p + 1) * n, sizeof(long long))
        if self.chan == NULL or self.rank == NULL or self.q == NULL or self.first == NULL \
                or self.ahead == NULL or self.before == NULL:
            raise MemoryError()
        for t in range(self.p):  # the visits, in service order (cycle, then port)
            for j in range(n):
                self.before[(t + 1) * n + j] = self.before[t * n + j]
            tri = 0  # i(i+1)/2 mod n
            for i in range(width):
                j = (self.step * t + tri) % n
                x = t * width + i
                self.chan[x], self.rank[x] = j, self.q[j]
                self.q[j] += 1
                self.before[(t + 1) * n + j] += 1
                tri = (tri + i + 1) % n
        for j in range(1, n):
            self.first[j] = self.first[j - 1] + self.q[j - 1]
        for j in range(n):  # mark every running maximum unset
            for r in range(self.q[j]):
                self.ahead[self.first[j] + r] = NONE
        for t in range(self.p):
            for i in range(width):
                x = t * width + i
                j, r = self.chan[x], self.rank[x]
                base = t + 1 - r * ii
                if r and self.ahead[self.first[j] + r - 1] > base:
                    base = self.ahead[self.first[j] + r - 1]
                self.ahead[self.first[j] + r] = base

    def __dealloc__(self):
        cfree(self.chan)
        cfree(self.rank)
        cfree(self.q)
        cfree(self.first)
        cfree(self.ahead)
        cfree(self.before)


cdef class Stretches:
    """The closed form for one pool of `n` channels serving a request every `ii` cycles."""

    def __cinit__(self, long long n, long long ii):
        self.n, self.ii, self.patterns = n, ii, {}
        self.free_rel = <long long*>calloc(n, sizeof(long long))
        self.last = <long long*>calloc(n, sizeof(long long))
        if self.free_rel == NULL or self.last == NULL:
            raise MemoryError()

    def __dealloc__(self):
        cfree(self.free_rel)
        cfree(self.last)

    cdef long long period(self, long long width):
        """The period of the channel pattern of `width` requests a cycle (without making
        its tables)."""
        return self.n // _gcd(width * (width + 1) // 2 % self.n, self.n)

    cdef Pattern pattern(self, long long width):
        """The period of `width` requests a cycle (made once per width)."""
        found = self.patterns.get(width)
        if found is None:
            found = self.patterns[width] = Pattern(self.n, self.ii, width)
        return <Pattern>found

    cdef long long serve(self, long long a, long long length, Py_ssize_t* live,
                         Py_ssize_t width, long long offset, long long* latest,
                         long long* earliest, bint want_first, long long* fp,
                         long long* cp) except -1:
        """Serve cycles a..a+length-1, in which ports `live` (bursts, in port order) each
        pick up one single-request message a cycle from channel offset `offset`: move the
        bursts' latest (and with `want_first` earliest) starts, the channels' free cycles
        (`fp`) and counts (`cp`); returns the offset after the stretch."""
        cdef Pattern pat = self.pattern(width)
        cdef long long n = self.n, ii = self.ii, p = pat.p
        cdef long long whole = length // p, rest = length % p
        cdef long long j, x, t, m, i, r, q, d, top, s, ahead, cnt, real
        cdef long long rows = p if p < length else length
        for j in range(n):  # in the channels of offset 0
            self.free_rel[j] = fp[(j + offset) % n] - a
            self.last[j] = NONE
        if want_first:  # the first period: a port's first visit to each channel
            for t in range(rows):
                for i in range(width):
                    x = t * width + i
                    j, r = pat.chan[x], pat.rank[x]
                    ahead = pat.ahead[pat.first[j] + r]
                    s = r * ii + (ahead if ahead > self.free_rel[j] else self.free_rel[j])
                    if a + s < earliest[live[i]]:
                        earliest[live[i]] = a + s
        for x in range(length - rows, length):  # the last period
            m, t = x // p, x % p
            for i in range(width):
                j, r = pat.chan[t * width + i], pat.rank[t * width + i]
                q = pat.q[j]
                ahead = pat.ahead[pat.first[j] + r]
                if m:
                    top = pat.ahead[pat.first[j] + q - 1]  # the first period's maximum
                    d = p - q * ii
                    if d >= 0:
                        ahead += m * d
                        if top + (m - 1) * d > ahead:
                            ahead = top + (m - 1) * d
                    else:
                        ahead = top
                s = (m * q + r) * ii + (ahead if ahead > self.free_rel[j] else
                                        self.free_rel[j])
                if a + s > latest[live[i]]:
                    latest[live[i]] = a + s
                if s > self.last[j]:
                    self.last[j] = s
        for j in range(n):
            cnt = pat.before[rest * n + j] + whole * pat.q[j]
            if cnt:
                real = (j + offset) % n
                cp[real] += cnt
                fp[real] = a + self.last[j] + ii
        return (offset + length % n * pat.step) % n
