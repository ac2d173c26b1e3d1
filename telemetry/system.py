"""About-1 Hz samples of a rank's process (psutil) and its GPU (NVML, where present)."""

from __future__ import annotations

import os
import threading

import psutil

from .schema import System


def _descendants(pid: int) -> list[int]:
    """``pid``'s child processes and theirs, from /proc/PID/task/*/children: a cost by child, not
    by the host's processes (psutil's children() reads every process's stat: 25 ms a sample on a
    host of 3,000 processes, on the heartbeat thread, which delayed heartbeats by seconds, review
    280). None where the kernel does not say (no such file)."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 4096:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{p}/task/{task}/children", encoding="ascii") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except (OSError, ValueError):
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


class SystemSampler:
    """Reads CPU %, RSS and, with a GPU index and NVML, utilisation, memory, temperature,
    power and SM clock. Every figure NVML cannot give stays None."""

    def __init__(self, gpu_index: int | None = None) -> None:
        self._proc = psutil.Process(os.getpid())
        self._children: dict[int, psutil.Process] = {}
        """The child processes seen, by pid: the same objects from sample to sample, whose CPU
        figure is the time since the last."""
        self._host_threads: set[int] = set()
        self.prime()
        self._nvml = None
        self._handle = None
        if gpu_index is not None:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
                self._handle = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
            except Exception:  # no driver, no device: CPU figures only
                self._nvml = None
                self._handle = None

    def rss_bytes(self) -> int:
        """Resident set size of this process."""
        return self._proc.memory_info().rss

    def rss_peak_bytes(self) -> int | None:
        """The most this process has held resident (VmHWM, Linux; None elsewhere): 8-9% over the
        largest RSS read after a step of an FSDP job on CPU (review 299)."""
        try:
            with open("/proc/self/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmHWM:"):
                        return int(line.split()[1]) * 1024  # (in kB)
        except (OSError, ValueError, IndexError):
            pass
        return None

    def prime(self) -> None:
        """Start the CPU figures' clocks in the calling thread, the one that will sample: the
        first call of each answers 0.0, and psutil keeps the host's last reading per thread
        (primed in the main thread, the heartbeat thread's first host figure read 0.0)."""
        self._proc.cpu_percent(None)
        psutil.cpu_percent(None)
        self._host_threads.add(threading.get_ident())

    def sample(self) -> System:
        """One System record (run, rank, seq and t are filled in by the reporter). In a thread
        that was not primed the host's CPU is unknown (None) this once, not 0.0."""
        primed = threading.get_ident() in self._host_threads
        host = psutil.cpu_percent(None)
        if not primed:
            self._host_threads.add(threading.get_ident())
        msg = System(cpu_pct=self._proc.cpu_percent(None), host_cpu_pct=host if primed else None, rss_bytes=self.rss_bytes())
        msg.rss_peak_bytes = self.rss_peak_bytes()
        self._sample_children(msg)
        nv, h = self._nvml, self._handle
        if nv is not None and h is not None:
            for attr, read in (
                ("gpu_util_pct", lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu)),
                ("gpu_mem_used_bytes", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).used)),
                ("gpu_mem_total_bytes", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).total)),
                ("gpu_temp_c", lambda: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))),
                ("gpu_power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                ("gpu_sm_clock_mhz", lambda: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))),
            ):
                try:
                    setattr(msg, attr, read())
                except Exception:  # a figure this device does not report
                    pass
        return msg

    def _sample_children(self, msg: System) -> None:
        """The rank's child processes, together (DataLoader workers: a rank at 17% of a core
        whose two workers did its data work, each holding 400 MiB of its own, read as neither;
        review 277): how many, their CPU and the memory only they hold. Nothing where it has
        none."""
        seen = {}
        cpu, uss = 0.0, 0
        for pid in _descendants(self._proc.pid):
            kid = self._children.get(pid)  # (its CPU figure: the time since the last sample)
            try:
                if kid is None:
                    kid = psutil.Process(pid)
                with kid.oneshot():
                    if kid.status() == psutil.STATUS_ZOMBIE:  # (ended, not yet reaped: holds nothing)
                        continue
                    cpu += kid.cpu_percent(None)
                    try:
                        uss += kid.memory_full_info().uss
                    except psutil.AccessDenied:
                        uss += kid.memory_info().rss
            except psutil.Error:  # (it ended meanwhile)
                continue
            seen[kid.pid] = kid
        self._children = seen
        if seen:
            msg.children, msg.children_cpu_pct, msg.children_uss_bytes = len(seen), cpu, uss

    def nvml_used_bytes(self) -> int | None:
        """NVML's used memory on the device, or None without NVML."""
        if self._nvml is None or self._handle is None:
            return None
        try:
            return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        except Exception:
            return None
