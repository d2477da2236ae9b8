"""NVIDIA GPUs since Pascal, as their datasheets give them: compute capability, memory, memory
bandwidth, dense tensor throughput (FP16, INT8, FP8 where the GPU has it) and maximum board power.
Matched on the name pynvml reports; a GPU not listed gets no physical prior (the page says so)
rather than a guess.

The throughputs only bound prefill and large batches (decode is bound by bandwidth until the batch
is large), so the row's figure is the one an inference engine can use: dense, without sparsity;
FP16 with FP32 accumulate on GeForce cards (what cuBLAS and Marlin use there); on cards without
tensor cores (Pascal) the plain FP16 rate, or the FP32 rate where FP16 runs at 1/64 of it.

The power is the most the board may draw as its datasheet gives it (maximum board power, TDP; the
top of a configurable range; GeForce cards' total graphics power for the reference design): only
the ceiling of an energy estimate (economics.py), never a measurement. A row whose figure cannot be
sourced, or that stands for boards of different power, has none, and gets no energy estimate."""

from __future__ import annotations

import re
from dataclasses import dataclass

DATASHEETS = ("NVIDIA product datasheets (memory bandwidth; dense tensor throughput without sparsity; maximum "
              "board power)")
ARCHITECTURE_WHITEPAPERS = "NVIDIA architecture whitepapers (Pascal GP102, Turing TU102, Ampere GA102, Ada AD102)"


@dataclass(frozen=True)
class GpuPeak:
    name: str
    words: tuple[str, ...]  # every one must appear in the reported name (lower case)
    compute_capability: tuple[int, int]
    memory_gib: float  # nominal per GPU
    bandwidth_gbs: float  # GB/s, 1e9 bytes
    fp16_tflops: float
    int8_tops: float | None = None  # dense INT8 tensor (Turing and newer); dp4a rate on Pascal 6.1
    fp8_tflops: float | None = None  # dense FP8 tensor (compute capability 8.9 and newer)
    source: str = DATASHEETS
    note: str = ""
    power_w: float | None = None  # maximum board power, W; None: not sourced (no energy estimate)

    @property
    def architecture(self) -> str:
        return architecture(self.compute_capability)

    def peak(self, precision: str) -> float:
        """The throughput matrix products of this precision reach ("fp16" | "fp8" | "int8" |
        "fp16-full"), in TFLOPS or TOPS; FP16's where the GPU has no such units. "fp16-full" is the
        tensor cores' full 16-bit rate, half the INT8 one: what FP16 accumulation reaches on GeForce
        cards, whose datasheet FP16 figure is FP32 accumulation at half that rate."""
        if precision == "fp16-full":
            return max(self.fp16_tflops, (self.int8_tops or 0) / 2)
        return {"fp8": self.fp8_tflops, "int8": self.int8_tops}.get(precision) or self.fp16_tflops


def architecture(cc: tuple[int, int]) -> str:
    """NVIDIA's name for the generation of a compute capability."""
    major, minor = tuple(cc)
    if major >= 10:
        return "Blackwell"
    return {6: "Pascal", 9: "Hopper"}.get(major) or (
        ("Volta" if minor < 5 else "Turing") if major == 7 else
        ("Ada" if minor >= 9 else "Ampere") if major == 8 else f"compute capability {major}.{minor}")


FP32_RATE = "FP16 at 1/64: the FP32 rate"
GEFORCE = ARCHITECTURE_WHITEPAPERS + "; GeForce specifications (total graphics power of the reference card)"
# Most specific first: "a100 80gb" before "a100", "3080 ti" before "3080".
PEAKS: tuple[GpuPeak, ...] = (
    # --- Pascal (no tensor cores) ---
    GpuPeak("Tesla P4", ("p4",), (6, 1), 8, 192, 5.5, 22, source=DATASHEETS, note=FP32_RATE, power_w=75),
    GpuPeak("Tesla P40", ("p40",), (6, 1), 24, 346, 11.8, 47, note=FP32_RATE, power_w=250),
    GpuPeak("Tesla P100 (SXM2)", ("p100", "sxm2"), (6, 0), 16, 732, 21.2, power_w=300),
    GpuPeak("Tesla P100 (PCIe, 12 GB)", ("p100", "12gb"), (6, 0), 12, 549, 18.7, power_w=250),
    GpuPeak("Tesla P100 (PCIe)", ("p100",), (6, 0), 16, 732, 18.7, power_w=250),
    GpuPeak("TITAN Xp", ("titan", "xp"), (6, 1), 12, 548, 12.1, source=GEFORCE, note=FP32_RATE, power_w=250),
    GpuPeak("GeForce GTX 1080 Ti", ("1080", "ti"), (6, 1), 11, 484, 11.3, source=GEFORCE,
            note=FP32_RATE, power_w=250),
    GpuPeak("GeForce GTX 1080", ("1080",), (6, 1), 8, 320, 8.9, source=GEFORCE, note=FP32_RATE, power_w=180),
    GpuPeak("GeForce GTX 1070", ("1070",), (6, 1), 8, 256, 6.5, source=GEFORCE, note=FP32_RATE, power_w=150),
    # --- Volta ---
    GpuPeak("Tesla V100S (PCIe)", ("v100s",), (7, 0), 32, 1134, 130, power_w=250),
    GpuPeak("Tesla V100 (SXM2, 32 GB)", ("v100", "sxm2", "32gb"), (7, 0), 32, 900, 125, power_w=300),
    GpuPeak("Tesla V100 (SXM2)", ("v100", "sxm2"), (7, 0), 16, 900, 125, power_w=300),
    GpuPeak("Tesla V100 (PCIe, 32 GB)", ("v100", "32gb"), (7, 0), 32, 900, 112, power_w=250),
    GpuPeak("Tesla V100 (PCIe)", ("v100",), (7, 0), 16, 900, 112, power_w=250),
    GpuPeak("TITAN V", ("titan", "v"), (7, 0), 12, 653, 110, source=GEFORCE, power_w=250),
    # --- Turing ---
    GpuPeak("Tesla T4", ("t4",), (7, 5), 16, 320, 65, 130, power_w=70),
    GpuPeak("Quadro RTX 8000", ("rtx", "8000"), (7, 5), 48, 672, 130.5, 261, power_w=295),
    GpuPeak("TITAN RTX", ("titan", "rtx"), (7, 5), 24, 672, 130, 261, source=GEFORCE, power_w=280),
    GpuPeak("GeForce RTX 2080 Ti", ("2080", "ti"), (7, 5), 11, 616, 53.8, 215.2, source=GEFORCE, power_w=250),
    GpuPeak("GeForce RTX 2080 SUPER", ("2080", "super"), (7, 5), 8, 496, 44.6, 178.4, source=GEFORCE, power_w=250),
    GpuPeak("GeForce RTX 2080", ("2080",), (7, 5), 8, 448, 40.3, 161.1, source=GEFORCE, power_w=215),
    GpuPeak("GeForce RTX 2070", ("2070",), (7, 5), 8, 448, 29.9, 119.4, source=GEFORCE, power_w=175),
    # --- Ampere ---
    GpuPeak("A100 80GB (SXM)", ("a100", "sxm4", "80gb"), (8, 0), 80, 2039, 312, 624, power_w=400),
    GpuPeak("A100 80GB (PCIe)", ("a100", "80gb"), (8, 0), 80, 1935, 312, 624, power_w=300),
    GpuPeak("A100 40GB", ("a100",), (8, 0), 40, 1555, 312, 624,
            note="no power: the row stands for the SXM4 board (400 W) and the PCIe card (250 W) alike"),
    GpuPeak("A30", ("a30",), (8, 0), 24, 933, 165, 330, power_w=165),
    GpuPeak("A10G", ("a10g",), (8, 6), 24, 600, 125, 250, source="AWS EC2 G5 instance specifications (24 GB, 600 GB/s)",
            note="AWS's variant of the A10; NVIDIA publishes no datasheet for it: the A10's throughputs, and no "
                 "power"),
    GpuPeak("A10", ("a10",), (8, 6), 24, 600, 125, 250, power_w=150),
    GpuPeak("A40", ("a40",), (8, 6), 48, 696, 149.7, 299.3, power_w=300),
    GpuPeak("A2", ("a2",), (8, 6), 16, 200, 18, 36, power_w=60),
    GpuPeak("RTX A6000", ("a6000",), (8, 6), 48, 768, 154.8, 309.7, power_w=300),
    GpuPeak("RTX A5000", ("a5000",), (8, 6), 24, 768, 111.1, 222.2, power_w=230),
    GpuPeak("GeForce RTX 3090 Ti", ("3090", "ti"), (8, 6), 24, 1008, 80, 320, source=GEFORCE, power_w=450),
    GpuPeak("GeForce RTX 3090", ("3090",), (8, 6), 24, 936, 71, 284, source=GEFORCE, power_w=350),
    GpuPeak("GeForce RTX 3080 Ti", ("3080", "ti"), (8, 6), 12, 912, 68.2, 272.8, source=GEFORCE, power_w=350),
    GpuPeak("GeForce RTX 3080", ("3080",), (8, 6), 10, 760, 59.5, 238, source=GEFORCE, power_w=320),
    GpuPeak("GeForce RTX 3070 Ti", ("3070", "ti"), (8, 6), 8, 608, 43.5, 174, source=GEFORCE, power_w=290),
    GpuPeak("GeForce RTX 3070", ("3070",), (8, 6), 8, 448, 40.6, 162.6, source=GEFORCE, power_w=220),
    GpuPeak("GeForce RTX 3060 Ti", ("3060", "ti"), (8, 6), 8, 448, 32.4, 129.6, source=GEFORCE, power_w=200),
    GpuPeak("GeForce RTX 3060", ("3060",), (8, 6), 12, 360, 25.6, 102, source=GEFORCE, power_w=170),
    # --- Ada ---
    GpuPeak("L4", ("l4",), (8, 9), 24, 300, 121, 242.5, 242.5, power_w=72),
    GpuPeak("L40S", ("l40s",), (8, 9), 48, 864, 362, 733, 733, power_w=350),
    GpuPeak("L40", ("l40",), (8, 9), 48, 864, 181, 362, 362, power_w=300),
    GpuPeak("RTX 6000 Ada", ("6000", "ada"), (8, 9), 48, 960, 364, 728.5, 728.5, power_w=300),
    # The datasheets give FP8 with sparsity (1,044.4 and 306.8 TFLOPS): dense is half, 16 bit half again.
    GpuPeak("RTX 5000 Ada", ("5000", "ada"), (8, 9), 32, 576, 261.1, 522.2, 522.2, power_w=250),
    GpuPeak("RTX 4000 Ada", ("4000", "ada"), (8, 9), 20, 360, 76.7, 153.4, 153.4, power_w=130),
    GpuPeak("GeForce RTX 4090", ("4090",), (8, 9), 24, 1008, 165, 660, 330, source=GEFORCE, power_w=450),
    GpuPeak("GeForce RTX 4080 SUPER", ("4080", "super"), (8, 9), 16, 736, 104, 418, 209, source=GEFORCE, power_w=320),
    GpuPeak("GeForce RTX 4080", ("4080",), (8, 9), 16, 717, 97.5, 390, 195, source=GEFORCE, power_w=320),
    GpuPeak("GeForce RTX 4070 Ti SUPER", ("4070", "ti", "super"), (8, 9), 16, 672, 88.2, 353, 176, source=GEFORCE,
            power_w=285),
    GpuPeak("GeForce RTX 4070 Ti", ("4070", "ti"), (8, 9), 12, 504, 80.2, 320.7, 160, source=GEFORCE, power_w=285),
    GpuPeak("GeForce RTX 4070 SUPER", ("4070", "super"), (8, 9), 12, 504, 71, 284, 142, source=GEFORCE, power_w=220),
    GpuPeak("GeForce RTX 4070", ("4070",), (8, 9), 12, 504, 58, 233, 117, source=GEFORCE, power_w=200),
    GpuPeak("GeForce RTX 4060 Ti", ("4060", "ti"), (8, 9), 8, 288, 44, 177, 88, source=GEFORCE, power_w=160),
    # --- Hopper ---
    GpuPeak("H100 (PCIe)", ("h100", "pcie"), (9, 0), 80, 2000, 756, 1513, 1513, power_w=350),
    GpuPeak("H100 NVL", ("h100", "nvl"), (9, 0), 94, 3900, 835, 1671, 1671, power_w=400),
    GpuPeak("H100 (SXM)", ("h100",), (9, 0), 80, 3350, 989, 1979, 1979, power_w=700),
    GpuPeak("H200", ("h200",), (9, 0), 141, 4800, 989, 1979, 1979, power_w=700),
    GpuPeak("H20", ("h20",), (9, 0), 96, 4000, 148, 296, 296, power_w=400),
    GpuPeak("GH200 (96 GB)", ("gh200",), (9, 0), 96, 4000, 989, 1979, 1979,
            note="no power: the datasheet gives the module's (450-1000 W, CPU and memory included), not the GPU's"),
    # --- Blackwell ---
    GpuPeak("B200", ("b200",), (10, 0), 180, 8000, 2250, 4500, 4500, power_w=1000),
    GpuPeak("GeForce RTX 5090", ("5090",), (12, 0), 32, 1792, 209.5, 838, 419, source=GEFORCE, power_w=575),
)


VARIANT_WORDS = {"ti", "super", "sff"}  # an RTX 4000 SFF Ada is a 70 W card with 280 GB/s


def peak_of(gpu_name: str) -> GpuPeak | None:
    """'Tesla V100-PCIE-16GB' (as pynvml names it) or 'Tesla V100 (PCIe)' (as this table does) -> the
    V100 PCIe row; None when the GPU is not listed."""
    exact = next((p for p in PEAKS if p.name.lower() == gpu_name.strip().lower()), None)
    if exact is not None:
        return exact
    words = set(re.sub(r"[-_(),]", " ", gpu_name.lower()).split())
    # A variant word the row does not name ("Ti", "SUPER") is another card, with other figures.
    return next((p for p in PEAKS if all(w in words for w in p.words)
                 and not (words & VARIANT_WORDS) - set(p.words)), None)
