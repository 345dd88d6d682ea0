"""The reference toolchain's STeP IR (`step_perf_ir` ProgramGraph files), both ways: its
wire schema (`schema`), shared; reading a graph as a `.step` program (`read`, `stepc
import`, below the front end, which compiles a `.pb` through it); writing a checked program
as a graph (`write`, `stepc export`, up with the sweeps: it runs the external streams'
generators)."""
