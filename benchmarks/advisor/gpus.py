"""GPU datasheet figures the physical prior needs: memory bandwidth and dense FP16 tensor (or, with
no tensor cores, FP16) throughput. NVIDIA's published peaks, per GPU, matched on the name pynvml
reports; a GPU not listed gets no prior (the page says so) rather than a guess."""

from __future__ import annotations

from dataclasses import dataclass

DATASHEETS = "NVIDIA product datasheets (memory bandwidth; dense FP16 tensor TFLOPS without sparsity)"


@dataclass(frozen=True)
class GpuPeak:
    name: str
    bandwidth_gbs: float  # GB/s, 1e9 bytes
    fp16_tflops: float  # dense, the tensor cores' FP16 (FP32 accumulate on GeForce cards); it only
    # bounds prefill and large batches, where decode stops being bound by bandwidth
    words: tuple[str, ...]  # every one must appear in the reported name (lower case)
    source: str = DATASHEETS


# Most specific first: "a100 80gb" before "a100".
PEAKS: tuple[GpuPeak, ...] = (
    GpuPeak("Tesla P40", 346, 11.8, ("p40",)),  # no tensor cores, FP16 at 1/64: the FP32 rate
    GpuPeak("Tesla P100 (SXM2)", 732, 21.2, ("p100", "sxm2")),
    GpuPeak("Tesla P100 (PCIe)", 732, 18.7, ("p100",)),  # 16 GB card; the 12 GB one has 549 GB/s
    GpuPeak("Tesla V100 (SXM2)", 900, 125, ("v100", "sxm2")),
    GpuPeak("Tesla V100 (PCIe)", 900, 112, ("v100",)),
    GpuPeak("Tesla T4", 320, 65, ("t4",)),
    GpuPeak("GeForce RTX 2080 Ti", 616, 53.8, ("2080", "ti")),
    GpuPeak("A10", 600, 125, ("a10",)),
    GpuPeak("A100 80GB (SXM)", 2039, 312, ("a100", "sxm4", "80gb")),
    GpuPeak("A100 80GB (PCIe)", 1935, 312, ("a100", "80gb")),
    GpuPeak("A100 40GB", 1555, 312, ("a100",)),
    GpuPeak("GeForce RTX 3060", 360, 25.6, ("3060",)),
    GpuPeak("GeForce RTX 3070", 448, 40.6, ("3070",)),
    GpuPeak("GeForce RTX 3080", 760, 59.5, ("3080",)),
    GpuPeak("GeForce RTX 3090", 936, 71, ("3090",)),
    GpuPeak("A30", 933, 165, ("a30",)),
    GpuPeak("A40", 696, 150, ("a40",)),
    GpuPeak("RTX A6000", 768, 155, ("a6000",)),
    GpuPeak("GeForce RTX 4070", 504, 58, ("4070",)),
    GpuPeak("GeForce RTX 4080", 717, 97.5, ("4080",)),
    GpuPeak("GeForce RTX 4090", 1008, 165, ("4090",)),
    GpuPeak("L4", 300, 121, ("l4",)),
    GpuPeak("L40S", 864, 362, ("l40s",)),
    GpuPeak("L40", 864, 181, ("l40",)),
    GpuPeak("H100 (PCIe)", 2000, 756, ("h100", "pcie")),
    GpuPeak("H100 NVL", 3900, 835, ("h100", "nvl")),
    GpuPeak("H100 (SXM)", 3350, 989, ("h100",)),
    GpuPeak("H200", 4800, 989, ("h200",)),
    GpuPeak("B200", 8000, 2250, ("b200",)),
)


def peak_of(gpu_name: str) -> GpuPeak | None:
    """'Tesla V100-PCIE-16GB' -> the V100 PCIe row; None when the GPU is not listed."""
    words = set(gpu_name.lower().replace("-", " ").replace("_", " ").split())
    return next((p for p in PEAKS if all(w in words for w in p.words)), None)
