"""Processor capability from /proc/cpuinfo text: the bf16 units by flag, never by anything else."""

from pathlib import Path

import pytest
from verl.utils.cpu_features import cpu_info, parse_cpuinfo

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse sse2 avx2 avx512f avx512dq avx512_bf16 avx512_vnni

processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse sse2 avx2 avx512f avx512dq avx512_bf16 avx512_vnni
"""
SKYLAKE = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8175M\nflags\t\t: fpu avx2 avx512f avx512bw\n"
SAPPHIRE = (
    "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8488C\n"
    "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
)
GRAVITON3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\nCPU part\t: 0xd40\n"
GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd crc32 atomics\nCPU part\t: 0xd0c\n"


@pytest.mark.parametrize(
    "text,arch,native,name",
    [
        (ZEN4, "x86_64", True, "AMD EPYC 9R14"),
        (SKYLAKE, "x86_64", False, "Intel(R) Xeon(R) Platinum 8175M"),
        (SAPPHIRE, "x86_64", True, "Intel(R) Xeon(R) Platinum 8488C"),
        (GRAVITON3, "aarch64", True, "0xd40"),
        (GRAVITON2, "aarch64", False, "0xd0c"),
    ],
)
def test_native_bf16_follows_the_flags(text, arch, native, name):
    info = parse_cpuinfo(text, arch)
    assert info.native_bf16 is native
    assert info.model_name == name


def test_describe_names_model_and_the_bf16_units():
    assert parse_cpuinfo(ZEN4, "x86_64").describe() == (
        "AMD EPYC 9R14 (x86_64; avx2 avx512f avx512_bf16; no amx_bf16)"
    )
    assert parse_cpuinfo(SKYLAKE, "x86_64").describe() == (
        "Intel(R) Xeon(R) Platinum 8175M (x86_64; avx2 avx512f; no avx512_bf16, no amx_bf16)"
    )
    assert "amx_tile amx_bf16" in parse_cpuinfo(SAPPHIRE, "x86_64").describe()


def test_this_machine_and_a_missing_file(tmp_path: Path):
    here = Path("/proc/cpuinfo")
    if here.exists():
        info = cpu_info()
        text = here.read_text()
        assert info.model_name in text and all(flag in text for flag in info.flags)
    missing = cpu_info(str(tmp_path / "no-cpuinfo"))
    assert missing.flags == frozenset() and not missing.native_bf16
