"""`dram`: an HBM2/HBM3 memory of channels, pseudo-channels, bank groups, banks and rows
under an open-row FR-FCFS controller, timed in the memory clock and converted to the
accelerator clock.

Per window of picked-up requests (see `WindowedMemory`), all in numpy except one short
loop over row runs:
1. Each request's byte address (from its burst's `Addresses`) is sliced into channel,
   pseudo-channel (PC), bank group, bank, row and column by the configured mapping
   (Ramulator's notation, e.g. RoBaRaCoCh), after dropping the request-offset bits.
2. FR-FCFS: each PC serves its requests in arrival order, except that within every
   `queue_depth` consecutive requests (one controller queue) where two rows of a bank
   compete, a request to a row already wanted by an older request of that queue is
   served right after it (first ready: row hits before older misses) if it can be in the
   queue by then: it arrived no later than
   the older request plus the worst-case (row conflict) service time of the requests
   between them.
   Consecutive requests to one bank row form a run.
3. Each run pays, on its bank: nothing on a row hit; ACT after `nRCD` on a closed bank;
   PRE + ACT on a conflict (PRE no earlier than `nRAS` after the ACT, `nRTP` after a read,
   write recovery after a write; ACT `nRP` later). ACTs respect `nRC` per bank and `nRRD`
   and `nFAW` per PC. Column commands respect the PC's data bus (`nBL` per access),
   `nCCDS`/`nCCDL` between bank groups/within one, and read-to-write (`nRTW`) and
   write-to-read (`nCWL + nBL + nWTR`) turnarounds. Requests of a run stream at
   `max(nBL, nCCDL)` per access, each no earlier than its arrival (a prefix maximum).
   Activations of one bank overlap other banks' transfers (bank parallelism).
4. All-bank refresh: every `nREFI` the PC closes its rows and stalls `nRP + nRFC`.
5. A read completes `nCL + nBL` after its last column command, a write `nCWL + nBL`;
   arrival is one accelerator cycle after pickup and the response is visible one cycle
   after completion (hop latency), as in the reference.
Not modelled: the command bus (one command per cycle), write buffering and drain modes,
per-bank refresh, power-down; requests larger than one access take consecutive columns.
"""

from __future__ import annotations

import math

import numpy as np

from stepc.hw.memory import mapping_fields
from stepc.sim.hbm.table import memory_model
from stepc.sim.hbm.window import Addresses, WindowedMemory, tiled_shape
from stepc.types import DTYPE_BYTES

FAR_PAST = -(1 << 40)


def field_sizes(hw) -> dict[str, int]:
    """How many values each field of the address mapping takes (columns of a page in
    units of the larger of the mapper transaction and the column access)."""
    d = hw.dram
    return {"Ch": hw.hbm.channels, "Ra": d.pseudo_channels, "Ba": d.bank_groups * d.banks,
            "Ro": d.rows, "Co": max(1, d.page_bytes // max(hw.mapper_bytes, d.access_bytes))}


def bank_geometry(hw) -> tuple[int, int]:
    """(bytes between consecutive banks in the address space, banks per pseudo-channel)
    under the configured mapping."""
    sizes = field_sizes(hw)
    span = hw.mapper_bytes
    for name in mapping_fields(hw.dram.mapping):
        if name == "Ba":
            break
        span *= sizes[name]
    return span, sizes["Ba"]


@memory_model("dram")
def from_config(kernel, hw) -> DramHbm:
    return DramHbm(kernel, hw)


class DramHbm(WindowedMemory):
    """The `dram` memory model."""

    def __init__(self, kernel, hw):
        cfg, dram = hw.hbm, hw.dram
        super().__init__(kernel, cfg.channels, cfg.arbiter_grants, cfg.outstanding)
        self.hw, self.cfg, self.d = hw, cfg, dram
        self.ratio = dram.clock_ratio  # memory cycles per accelerator cycle
        self.n_cas = max(1, cfg.request_bytes // dram.access_bytes)
        self.step = max(dram.nBL, dram.nCCDL)  # per access within one bank's row
        self.sizes = field_sizes(hw)
        self.mapper_bytes = hw.mapper_bytes
        self.fields = mapping_fields(dram.mapping)
        n_pc = cfg.channels * dram.pseudo_channels
        n_bank = n_pc * self.sizes["Ba"]
        self.bus_cas = [FAR_PAST] * n_pc  # last column command
        self.bus_bg = [-1] * n_pc
        self.bus_write = [False] * n_pc
        self.last_act = [FAR_PAST] * n_pc
        self.last_act_bg = [-1] * n_pc
        self.faw = [FAR_PAST] * (4 * n_pc)  # the last four ACTs of each PC, a ring
        self.faw_next = [0] * n_pc
        self.next_ref = [dram.nREFI] * n_pc
        self.open_row = [-1] * n_bank
        self.act_at = [FAR_PAST] * n_bank
        self.pre_ready = [0] * n_bank  # earliest PRE
        self.act_ready = [0] * n_bank  # earliest ACT of a closed bank (after refresh)
        self.cas_ready = [0] * n_bank  # earliest column command to the open row
        # a lower bound of pickup -> visible, in accelerator cycles (window boundaries)
        self.fastest = min(dram.nCL, dram.nCWL) + dram.nBL  # column command -> done
        self.min_latency = 1 + int(self.fastest / self.ratio)
        self.worst_service = self.n_cas * self.step + dram.nRP + max(dram.nRCDRD, dram.nRCDWR)

    def tensor_stagger(self) -> tuple[int, int]:
        return bank_geometry(self.hw) if self.d.placement == "staggered" else (0, 1)

    def addresses(self, layout, tref, tile_index: int, rows: int, cols: int) -> Addresses:
        """In a row-major tensor a tile's rows are a tensor row apart; in the `tiled` layout
        each tile is stored contiguously, tile after tile; `blocked` stores blk x blk
        blocks row-major over blocks; `reference` is the artifact's formula, every tensor
        at 0."""
        base, full = layout.get(tref.name, (0, tuple(tref.shape)))
        size = DTYPE_BYTES[tref.dtype]
        view = tuple(tref.shape)
        offset = sum(i * math.prod(full[k + 1:]) for k, i in enumerate(tref.index))
        per_row = -(-cols * size // self.cfg.request_bytes)
        if self.d.layout == "tiled":
            return Addresses(base + (offset + tile_index * rows * cols) * size, cols * size,
                             per_row)
        if self.d.layout == "reference":
            return Addresses((offset + tile_index * rows * cols) * size, view[-1] * size,
                             per_row)
        blk = self.d.block
        *lead, r, c = np.unravel_index(tile_index, tiled_shape(view, [rows, cols]))
        lead_elems = sum(int(i) * math.prod(view[k + 1:]) for k, i in enumerate(lead))
        if self.d.layout == "blocked" and rows % blk == 0 and cols % blk == 0 and \
                view[-1] % blk == 0:  # each block row of the tile is one run
            first = offset + lead_elems + (int(r) * rows * view[-1] + int(c) * cols * blk)
            run = cols * blk * size
            return Addresses(base + first * size, view[-1] * blk * size,
                             -(-run // self.cfg.request_bytes))
        elem = offset + lead_elems + int(r) * rows * view[-1] + int(c) * cols
        return Addresses(base + elem * size, view[-1] * size, per_row)

    def _earliest_done(self, b, cycle: int) -> int:
        """No earlier than the last request's pickup plus the unloaded latency, nor than a
        column command after the last one its pseudo-channel has already committed (a
        tighter bound while a PC is backlogged: longer windows, fuller FR-FCFS queues)."""
        bound = max(b.next_cycle, cycle) + b.messages + self.min_latency
        if b.addr is None:
            return bound
        k = b.issued + (b.messages - 1) * b.per_message + b.last_requests - 1
        f = self.decode(b.addr.at(k, self.cfg.request_bytes))
        g = f["Ch"] * self.d.pseudo_channels + f["Ra"]
        done = self.bus_cas[g] + 1 + self.fastest
        return max(bound, math.ceil(done / self.ratio - 1e-9) + 1)

    def decode(self, addr):
        """Slice byte addresses (an int or an array) into the mapping's fields."""
        q = addr // self.mapper_bytes
        out = {}
        for name in self.fields:
            size = self.sizes[name]
            out[name] = q % size
            q = q // size
        return out

    def _serve(self, cycles, burst, request, bursts):
        d, cfg = self.d, self.cfg
        n = len(cycles)
        base = np.array([b.addr.base if b.addr else 0 for b in bursts], dtype=np.int64)
        stride = np.array([b.addr.row_stride if b.addr else cfg.request_bytes
                           for b in bursts], dtype=np.int64)
        per_row = np.array([b.addr.per_row if b.addr else 1 for b in bursts], dtype=np.int64)
        writes = np.array([b.write for b in bursts], dtype=bool)[burst]
        pr = per_row[burst]
        addr = base[burst] + (request // pr) * stride[burst] + (request % pr) * cfg.request_bytes
        f = self.decode(addr)
        pc = f["Ch"] * d.pseudo_channels + f["Ra"]
        bank, row = f["Ba"], f["Ro"]
        arrival = np.ceil((cycles + 1) * self.ratio - 1e-9).astype(np.int64)

        # per PC in arrival order; FR-FCFS groups rows within each queue-sized chunk
        idx = np.arange(n)
        order = np.lexsort((idx, arrival, pc))
        pc_s = pc[order]
        starts = np.flatnonzero(np.r_[True, pc_s[1:] != pc_s[:-1]])
        pos = idx - np.repeat(starts, np.diff(np.r_[starts, n]))
        chunk = pos // d.queue_depth
        key = (((pc_s * (int(chunk.max()) + 1) + chunk) * self.sizes["Ba"] + bank[order])
               * d.rows + row[order]) * 2 + writes[order]
        uniq, inv = np.unique(key, return_inverse=True)
        first = np.full(len(uniq), n, dtype=np.int64)
        np.minimum.at(first, inv, idx)
        head = first[inv]
        # only rows that compete for a bank within the queue are regrouped (hits are
        # otherwise served oldest first, which interleaves bank groups)
        bank_of = uniq // (d.rows * 2)
        _, bank_inv, rows_in_bank = np.unique(bank_of, return_inverse=True,
                                              return_counts=True)
        contested = (rows_in_bank[bank_inv] > 1)[inv]
        # a request moves up behind an older one to its row only if it could be queued by
        # then: it arrived within the worst-case (row conflict) service time of the
        # requests between them
        a_sorted = arrival[order]
        tb = self.n_cas * self.step
        joins = contested & (a_sorted - a_sorted[head] <= (idx - head) * self.worst_service)
        regroup = np.lexsort((idx, np.where(joins, head, idx)))
        order, key = order[regroup], key[regroup]

        run_start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        run_len = np.diff(np.r_[run_start, n])
        run_of = np.repeat(np.arange(len(run_start)), run_len)
        within = idx - run_start[run_of]
        a = arrival[order]
        lo = int(a.min())
        span = int(a.max()) - lo + tb * n + 1
        m = np.maximum.accumulate(a - lo - within * tb + run_of * span) - run_of * span + lo
        last_m = m[run_start + run_len - 1]

        heads = order[run_start]
        t0 = self._runs(pc[heads].tolist(), bank[heads].tolist(), row[heads].tolist(),
                        writes[heads].tolist(), a[run_start].tolist(), run_len.tolist(),
                        last_m.tolist())
        cas = within * tb + np.maximum(np.asarray(t0, dtype=np.int64)[run_of], m)
        w = writes[order]
        done_mem = cas + (self.n_cas - 1) * self.step + d.nBL + np.where(w, d.nCWL, d.nCL)
        done = np.empty(n, dtype=np.int64)
        done[order] = np.ceil(done_mem / self.ratio - 1e-9).astype(np.int64) + 1
        self.stats.per_channel += np.bincount(f["Ch"], minlength=cfg.channels)
        return done

    def _runs(self, pcs, banks, rows, writes, firsts, lengths, last_ms) -> list[int]:
        """The first column command of each run, in service order; updates bank state.
        (The hot loop: plain comparisons instead of max(), state in flat lists.)"""
        d = self.d
        n_bg_banks, n_bgs = self.sizes["Ba"], d.bank_groups
        tb, extra = self.n_cas * self.step, (self.n_cas - 1) * self.step
        nRP, nRC, nRAS, nFAW = d.nRP, d.nRC, d.nRAS, d.nFAW
        nRRDS, nRRDL = d.nRRDS, d.nRRDL
        same_bg, other_bg = max(d.nBL, d.nCCDL), max(d.nBL, d.nCCDS)
        w2r_same, w2r_other = d.nCWL + d.nBL + d.nWTRL, d.nCWL + d.nBL + d.nWTRS
        nRTW, nRTP, nRCDRD, nRCDWR = d.nRTW, d.nRTP, d.nRCDRD, d.nRCDWR
        nREFI, ref_stall = d.nREFI, d.nRP + d.nRFC
        w_recovery = d.nCWL + d.nBL + d.nWR
        bus_cas, bus_bg, bus_write = self.bus_cas, self.bus_bg, self.bus_write
        open_row, pre_ready, act_ready, cas_ready = (self.open_row, self.pre_ready,
                                                     self.act_ready, self.cas_ready)
        act_at, last_act, last_act_bg = self.act_at, self.last_act, self.last_act_bg
        faw, faw_next, next_ref = self.faw, self.faw_next, self.next_ref
        hits = misses = conflicts = refreshes = 0
        out = []
        for g, bk, row, w, first, length, last_m in zip(pcs, banks, rows, writes, firsts,
                                                        lengths, last_ms):
            bg = bk % n_bgs
            if w == bus_write[g]:
                nxt = bus_cas[g] + (same_bg if bus_bg[g] == bg else other_bg)
            elif w:  # read -> write
                nxt = bus_cas[g] + nRTW
            else:  # write -> read
                nxt = bus_cas[g] + (w2r_same if bus_bg[g] == bg else w2r_other)
            start = first if first > nxt else nxt
            if nREFI and start >= next_ref[g]:
                periods = (start - next_ref[g]) // nREFI
                ref_end = next_ref[g] + periods * nREFI + ref_stall
                lo = g * n_bg_banks
                for b in range(lo, lo + n_bg_banks):
                    open_row[b] = -1
                    act_ready[b] = ref_end
                next_ref[g] += (periods + 1) * nREFI
                refreshes += periods + 1
            b = g * n_bg_banks + bk
            if open_row[b] == row:
                ready = cas_ready[b]
                hits += length
            else:
                if open_row[b] >= 0:
                    act = (first if first > pre_ready[b] else pre_ready[b]) + nRP
                    conflicts += 1
                else:
                    act = first if first > act_ready[b] else act_ready[b]
                    misses += 1
                hits += length - 1
                t = act_at[b] + nRC
                if t > act:
                    act = t
                t = last_act[g] + (nRRDL if last_act_bg[g] == bg else nRRDS)
                if t > act:
                    act = t
                slot = g * 4 + faw_next[g]  # the oldest of the PC's last four ACTs
                t = faw[slot] + nFAW
                if t > act:
                    act = t
                faw[slot] = act
                faw_next[g] = (faw_next[g] + 1) & 3
                last_act[g], last_act_bg[g], act_at[b] = act, bg, act
                open_row[b] = row
                pre_ready[b] = act + nRAS
                ready = cas_ready[b] = act + (nRCDWR if w else nRCDRD)
            t0 = ready if ready > start else start
            last = (length - 1) * tb + (t0 if t0 > last_m else last_m) + extra
            bus_cas[g], bus_bg[g], bus_write[g] = last, bg, w
            t = last + (w_recovery if w else nRTP)
            if t > pre_ready[b]:
                pre_ready[b] = t
            out.append(t0)
        stats = self.stats
        stats.row_hits += hits
        stats.row_misses += misses
        stats.row_conflicts += conflicts
        stats.refreshes += refreshes
        return out

