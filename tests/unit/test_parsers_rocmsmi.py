"""rocm-smi parsers: --showallinfo --json and --showtopo, on real recordings."""

from __future__ import annotations

from pathlib import Path

from r9700ctl.agent.parsers import rocmsmi

RECORDED = Path(__file__).resolve().parents[2] / "r9700ctl" / "data" / "recorded"


def test_showallinfo_json_gives_name_ids_gfx_bus_vbios_and_firmware():
    """Pins the card0/system layout with human-readable keys (RX 6600, rocm-smi via jq)."""
    report = rocmsmi.parse_json_file(RECORDED / "rx6600-1x" / "rocm-smi.json")

    assert report.error is None
    assert report.driver_version == "7.0.0-3-pve"
    (card,) = report.cards
    assert card.index == 0
    assert card.name == "Navi 23 [Radeon RX 6600/6600 XT/6600M]"
    assert (card.device_id, card.device_rev, card.subsystem_id, card.sku) == (
        "0x73ff",
        "0xc7",
        "0x05d5",
        "D534P00",
    )
    assert card.gfx_target == "gfx1032"
    assert card.bdf == "0000:0b:00.0"  # printed upper-case, normalised
    assert card.vbios_version == "115-D534P00-100"
    assert card.unique_id is None  # "N/A"
    assert card.gpu_use_pct == 0.0
    assert card.firmware["SMC"] == "00.59.50.00"
    assert len(card.firmware) == 12


def test_showallinfo_strings_with_units_become_numbers():
    """Pins rocm-smi's "(800Mhz)" clocks, "2 (16.0GT/s x16)" link and byte counts."""
    text = (
        '{"card1": {"sclk clock speed:": "(800Mhz)", "pcie clock level": "2 (16.0GT/s x16)",'
        ' "VRAM Total Memory (B)": "34208743424", "Temperature (Sensor junction) (C)": "52.0",'
        ' "Max Graphics Package Power (W)": "300.0", "Average Graphics Package Power (W)": "17.0"}}'
    )
    (card,) = rocmsmi.parse_json(text).cards

    assert card.index == 1
    assert card.clocks_mhz == {"sclk": 800.0}
    assert (card.pcie_speed_gts, card.pcie_width) == (16.0, 16)
    assert card.vram_total_mib == 34208743424 / 2**20
    assert (card.temperature_hotspot_c, card.power_cap_w, card.power_w) == (52.0, 300.0, 17.0)


def test_showtopo_gives_every_pair_as_pcie_with_weight_and_hops():
    """Pins ROCm/rocm_smi_lib#108: four GPUs joined only by PCIe, weight 52, 3 hops."""
    topo = rocmsmi.parse_topo_file(RECORDED / "amd-4x-pcie" / "rocm-smi-topo.txt")

    assert topo.error is None
    assert topo.gpus == [0, 1, 2, 3]
    pairs = topo.pairs()
    assert len(pairs) == 12
    assert {(kind, weight, hops) for _a, _b, kind, weight, hops in pairs} == {("PCIE", 52, 3)}
    assert topo.link_type[0][0] is None  # the diagonal "0" is no link
    assert topo.numa_nodes == {}  # the recording was trimmed before the NUMA lines


def test_showtopo_numa_lines_in_both_spellings_are_read():
    text = "== Numa Nodes ==\nGPU[0]\t\t: (Topology) Numa Node: 1\n"
    text += "GPU 1          : (Topology) Numa Affinity: 3\n"
    topo = rocmsmi.parse_topo(text + "== Weight between two GPUs ==\n       GPU0\nGPU0   0\n")

    assert topo.numa_nodes == {0: 1}
    assert topo.numa_affinity == {1: 3}


def test_json_that_is_not_rocm_smi_says_so():
    assert rocmsmi.parse_json("[1, 2]", "rocm-smi.json").error == (
        "could not read rocm-smi.json: expected an object of cardN entries, got list"
    )
    assert rocmsmi.parse_json('{"system": {}}', "rocm-smi.json").error == (
        "could not read rocm-smi.json: no cardN entries in it"
    )
