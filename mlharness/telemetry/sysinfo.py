"""Facts about the host: a cheap summary recorded with every run (:func:`host_facts`), and a full hardware and
software inventory for system descriptions (:func:`detect_system`).

Detection reads Linux's /proc and /sys, NVML (nvidia-ml-py) for NVIDIA accelerators and installed package
versions. Whatever cannot be found is left out of the result (never guessed), so the caller can tell the user
which fields still need a value.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import platform
import re
import socket
from collections import Counter
from pathlib import Path
from typing import Any

from mlharness.fileguard import UnusableFile, read_bytes_bounded

log = logging.getLogger(__name__)

SYS_CPU = Path("/sys/devices/system/cpu")
FRAMEWORK_PACKAGES = ("onnxruntime", "onnxruntime-gpu", "torch", "tensorflow", "tensorflow-cpu", "tensorrt",
                      "openvino", "jax")
STACK_PACKAGES = ("mlharness", "mlcommons-loadgen", "numpy", "onnx", "opencv-python-headless", "pillow",
                  "transformers", "nibabel", "scipy")


def _cpu_model() -> str:
    for line in (_read_kernel(Path("/proc/cpuinfo")) or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def host_facts() -> dict[str, Any]:
    """A few facts recorded in every run's metadata; cheap (no subprocess, no NVML)."""
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
    }


KERNEL_FILE_LIMIT = 64 << 20
"""Most bytes read of a /proc or /sys file: /proc/cpuinfo of a host with hundreds of cores is a few MiB."""


def _read_bytes(path: Path, limit: int = KERNEL_FILE_LIMIT) -> bytes | None:
    """A kernel file's bytes, None where it cannot be read (absent, root only, not a regular file). Their sizes
    read 0 or 4096, whatever they hold: the read is bounded by ``limit`` instead."""
    try:
        return read_bytes_bounded(path, "system file", limit)
    except (OSError, UnusableFile):
        return None


def _read_kernel(path: Path) -> str | None:
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", errors="replace")


def _read(path: Path) -> str | None:
    text = _read_kernel(path)
    return None if text is None else text.strip()


def format_bytes(n: float, unit: str = "B") -> str:
    """1024-based sizes the way system descriptions write them: '24 GB', '1.5 TB', '32 KB'."""
    for suffix in ("", "K", "M", "G", "T", "P"):
        if n < 1024 or suffix == "P":
            value = f"{n:.1f}".rstrip("0").rstrip(".")
            return f"{value} {suffix}{unit}"
        n /= 1024
    raise AssertionError("unreachable")


def cpu_info() -> dict[str, Any]:
    """Model, sockets, cores per socket, threads, max frequency and cache sizes."""
    info: dict[str, Any] = {"model": _cpu_model(), "threads": os.cpu_count()}
    fields: list[dict[str, str]] = []
    try:
        block: dict[str, str] = {}
        for line in (_read_kernel(Path("/proc/cpuinfo")) or "").splitlines():
            if not line.strip():
                if block:
                    fields.append(block)
                block = {}
                continue
            key, _, value = line.partition(":")
            block[key.strip()] = value.strip()
        if block:
            fields.append(block)
    except OSError:
        pass
    # sockets and physical cores from the kernel's topology (any architecture), else from x86's cpuinfo fields
    topology = [(_read(t / "physical_package_id"), _read(t / "core_id"))
                for t in SYS_CPU.glob("cpu[0-9]*/topology")]
    if not any(pkg for pkg, _ in topology):
        topology = [(b.get("physical id"), b.get("core id")) for b in fields if "physical id" in b]
    packages = {pkg for pkg, _ in topology if pkg is not None}
    if packages:
        info["sockets"] = len(packages)
        cores = {(pkg, core) for pkg, core in topology if core is not None}
        if cores:
            info["cores_per_socket"] = len(cores) // len(packages)
    if "cores_per_socket" not in info and fields and "cpu cores" in fields[0]:
        info["cores_per_socket"] = int(fields[0]["cpu cores"])
    max_khz = _read(SYS_CPU / "cpu0" / "cpufreq" / "cpuinfo_max_freq")
    if max_khz and max_khz.isdigit():
        info["frequency_mhz"] = int(max_khz) // 1000
    elif fields and "cpu MHz" in fields[0]:
        info["frequency_mhz"] = round(float(fields[0]["cpu MHz"]))
    caches = []
    for index in sorted((SYS_CPU / "cpu0" / "cache").glob("index*")):
        level, kind, size = (_read(index / n) for n in ("level", "type", "size"))
        m = re.fullmatch(r"(\d+)([KMG]?)", size or "")
        if level and m:
            tag = {"Data": "d", "Instruction": "i"}.get(kind or "", "")
            nbytes = int(m.group(1)) * 1024 ** " KMG".index(m.group(2) or " ")
            caches.append(f"L{level}{tag} {format_bytes(nbytes)}")
    if caches:
        info["caches"] = ", ".join(caches)
    return info


def memory_info() -> dict[str, Any]:
    info: dict[str, Any] = {}
    meminfo = _read(Path("/proc/meminfo")) or ""
    m = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    total = int(m.group(1)) * 1024 if m else _memory_bytes()
    if total:
        info["capacity"] = format_bytes(total)
    config = _dimm_configuration() or _edac_configuration() or _numa_configuration()
    if config:
        info["configuration"] = config
    return info


def _edac_configuration() -> str | None:
    """'8x 32 GB DDR4' from the kernel's EDAC memory controllers, which any user may read (when loaded)."""
    dimms: Counter[str] = Counter()
    for dimm in sorted(Path("/sys/devices/system/edac/mc").glob("mc*/dimm*")):
        size, kind = _read(dimm / "size"), _read(dimm / "dimm_mem_type") or "DRAM"
        if size and size.isdigit() and int(size) > 0:
            dimms[f"{format_bytes(int(size) * 1024 * 1024)} {kind.split('-')[-1]}"] += 1
    return ", ".join(f"{n}x {d}" for d, n in dimms.items()) or None


def _numa_configuration() -> str | None:
    """What the kernel tells any user about the memory's layout: its NUMA nodes and their sizes (the modules
    behind them are in SMBIOS, which only root may read)."""
    sizes: Counter[str] = Counter()
    for node in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        m = re.search(r"MemTotal:\s+(\d+) kB", _read(node / "meminfo") or "")
        if m:
            sizes[format_bytes(int(m.group(1)) * 1024)] += 1
    if not sizes:
        return None
    nodes = ", ".join(f"{n}x {size}" for size, n in sizes.items())
    return f"{nodes} NUMA node{'s' if sum(sizes.values()) > 1 else ''} (module layout: SMBIOS, readable by root)"


def _dimm_configuration() -> str | None:
    """'8x 32 GB DDR5-4800' from the SMBIOS memory-device tables (type 17), readable as root only."""
    root = Path("/sys/firmware/dmi/entries")
    dimms: Counter[str] = Counter()
    for entry in sorted(root.glob("17-*")) if root.is_dir() else []:
        raw = _read_bytes(entry / "raw", 64 << 10)  # an SMBIOS structure: under 256 bytes
        if raw is None:
            return None
        if len(raw) < 0x17:
            continue
        size = int.from_bytes(raw[0x0C:0x0E], "little")
        if size in (0, 0xFFFF):
            continue  # empty slot or unknown
        mb = int.from_bytes(raw[0x1C:0x20], "little") if size == 0x7FFF and len(raw) >= 0x20 else (
            size & 0x7FFF if not size & 0x8000 else (size & 0x7FFF) // 1024)
        kinds = {0x1A: "DDR4", 0x22: "DDR5", 0x18: "DDR3", 0x1E: "LPDDR4", 0x23: "LPDDR5"}
        kind = kinds.get(raw[0x12], "DRAM")
        speed = int.from_bytes(raw[0x15:0x17], "little")
        dimms[f"{format_bytes(mb * 1024 * 1024)} {kind}" + (f"-{speed}" if speed else "")] += 1
    return ", ".join(f"{n}x {d}" for d, n in dimms.items()) or None


def storage_info() -> dict[str, Any]:
    """Total size and kind of the physical block devices (loop, RAM and device-mapper devices excluded)."""
    total = 0
    kinds: Counter[str] = Counter()
    for dev in sorted(Path("/sys/block").glob("*")):
        if re.match(r"(loop|ram|zram|dm-|md|sr|fd)", dev.name):
            continue
        sectors = _read(dev / "size")
        if not sectors or not sectors.isdigit() or int(sectors) == 0:
            continue
        size = int(sectors) * 512
        total += size
        if dev.name.startswith("nvme"):
            kind = "NVMe SSD"
        elif _read(dev / "queue" / "rotational") == "1":
            # virtual disks (virtio) report rotational=1 whatever backs them
            kind = "virtual disk" if dev.name.startswith("vd") else "HDD"
        else:
            kind = "SSD"
        kinds[f"{format_bytes(size)} {kind}"] += 1
    if not total:
        return {}
    return {"capacity": format_bytes(total), "type": ", ".join(f"{n}x {k}" for k, n in kinds.items())}


def network_info() -> dict[str, Any]:
    """Physical network interfaces (those backed by a device) and their link speeds."""
    nics = []
    for iface in sorted(Path("/sys/class/net").glob("*")):
        if iface.name == "lo" or not (iface / "device").exists():
            continue
        speed = _read(iface / "speed") or ""
        driver = iface / "device" / "driver"
        nics.append({
            "name": iface.name,
            "speed_mbit": int(speed) if speed.isdigit() and int(speed) > 0 else None,  # -1 when unknown
            "driver": Path(os.path.realpath(driver)).name if driver.exists() else None,
        })
    return {"nics": nics}


def accelerator_info() -> dict[str, Any]:
    """NVIDIA GPUs through NVML (nvidia-ml-py): count, model, memory, clocks, PCIe link, NVLink, driver."""
    try:
        import pynvml
    except ImportError:
        return {"count": 0, "source": "nvidia-ml-py not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return {"count": 0, "source": f"NVML unavailable ({e})"}
    try:
        count = pynvml.nvmlDeviceGetCount()
        devices = [_device_facts(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = None
        if hasattr(pynvml, "nvmlSystemGetCudaDriverVersion_v2"):
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        return {"count": count, "devices": devices, "source": "NVML", "driver": _text(driver),
                "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None}
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _device_facts(pynvml: Any, handle: Any) -> dict[str, Any]:
    """Name and memory of one GPU, plus what this GPU and driver can report: max SM clock, PCIe link, NVLinks."""
    dev: dict[str, Any] = {"name": _text(pynvml.nvmlDeviceGetName(handle)),
                           "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)}
    optional = {
        "max_sm_clock_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "pcie_gen": lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
        "pcie_width": lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle),
        "nvlinks": lambda: _active_nvlinks(pynvml, handle),
    }
    for key, call in optional.items():
        try:
            dev[key] = call()
        except pynvml.NVMLError:
            continue
    return dev


def _active_nvlinks(pynvml: Any, handle: Any) -> int:
    active = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active += pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError:
            break
    return active


def os_info() -> str:
    release = _read(Path("/etc/os-release")) or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', release, re.M)
    name = m.group(1) if m else f"{platform.system()} {platform.release()}"
    return f"{name}, kernel {platform.release()}" if platform.system() == "Linux" else name


def package_versions(names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def detect_system() -> dict[str, Any]:
    """Everything detectable about the host, grouped (cpu, memory, storage, network, accelerators, software)."""
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu_info(),
        "memory": memory_info(),
        "storage": storage_info(),
        "network": network_info(),
        "accelerators": accelerator_info(),
        "os": os_info(),
        "python": platform.python_version(),
        "frameworks": package_versions(FRAMEWORK_PACKAGES),
        "software": package_versions(STACK_PACKAGES),
    }
