"""The catalog's node topology: devices per node, per-direction link bandwidths, hop latencies,
each with a source; and the validation of a user's topology keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorledger.errors import ConfigError
from tensorledger.hardware import catalog, get_hardware

G = 1e9
US = 1e-6

# chip: (devices per node, intra-node per direction, NIC per device per direction or None)
# from the datasheets: links × per-link rate per direction, NIC Gbit/s ÷ 8.
TOPOLOGY = {
    "a100-40gb": (8, 12 * 25 * G, 200 / 8 * G),      # NVLink 3: 12 links; HDR 200 Gb/s
    "a100-80gb": (8, 12 * 25 * G, 200 / 8 * G),
    "h100-sxm": (8, 18 * 25 * G, 400 / 8 * G),       # NVLink 4: 18 links; NDR 400 Gb/s
    "h200-sxm": (8, 18 * 25 * G, 400 / 8 * G),
    "b200": (8, 18 * 50 * G, 400 / 8 * G),           # NVLink 5: 18 links of 50 GB/s
    "mi300x": (8, 7 * 64 * G, 400 / 8 * G),          # 7 Infinity Fabric links of 64 GB/s
    "v100-sxm": (8, 6 * 25 * G, 4 * 100 / 8 / 8 * G),  # NVLink 2: 6 links; 4 EDR ports / 8
    "h100-pcie": (8, 16 * 32 / 8 * G, None),         # PCIe 5.0: 16 lanes × 32 GT/s ÷ 8
    "l4": (8, 16 * 16 / 8 * G, None),                # PCIe 4.0: 16 lanes × 16 GT/s ÷ 8
}


@pytest.mark.parametrize("chip_id", sorted(TOPOLOGY))
def test_topology_numbers(chip_id: str) -> None:
    chip = get_hardware(chip_id)
    devices, intra, nic = TOPOLOGY[chip_id]
    assert chip.devices_per_node == devices
    assert chip.intra_node_bytes_per_s == pytest.approx(intra)
    assert chip.inter_node_bytes_per_s == (None if nic is None else pytest.approx(nic))


@pytest.mark.parametrize("chip_id", sorted(TOPOLOGY))
def test_per_direction_is_half_the_displayed_interconnect(chip_id: str) -> None:
    # a second path: the datasheet's interconnect figure counts both directions
    chip = get_hardware(chip_id)
    assert chip.interconnect_bytes_per_s is not None
    assert chip.intra_node_bytes_per_s == pytest.approx(chip.interconnect_bytes_per_s / 2)


def test_hop_latencies_are_nccl_tuning_figures() -> None:
    # NCCL tuning.cc hwLat, ring, LL protocol: NVLink 0.6 us, PCIe 1.0 us, network 2.7 us
    for chip in catalog().values():
        if chip.intra_node_latency_s is not None:
            pcie = chip.interconnect_kind is not None and "PCIe" in chip.interconnect_kind
            assert chip.intra_node_latency_s == pytest.approx((1.0 if pcie else 0.6) * US)
        if chip.inter_node_latency_s is not None:
            assert chip.inter_node_latency_s == pytest.approx(2.7 * US)


def test_every_topology_number_has_its_own_source() -> None:
    keys = {"devices_per_node": "devices_per_node",
            "intra_node_bandwidth": "intra_node_bytes_per_s",
            "inter_node_bandwidth": "inter_node_bytes_per_s",
            "intra_node_latency": "intra_node_latency_s",
            "inter_node_latency": "inter_node_latency_s"}
    seen = 0
    for chip in catalog().values():
        for key, attribute in keys.items():
            if getattr(chip, attribute) is not None:
                seen += 1
                assert "per direction" in chip.specific_source(key) or "latenc" in key, (
                    chip.id, key)
                assert len(chip.specific_source(key)) > 40, (chip.id, key)
    assert seen == 7 * 5 + 2 * 3  # seven chips with every key, two PCIe chips without a NIC


def test_tpus_and_the_4090_state_no_topology() -> None:
    for chip_id in ("tpu-v5e", "tpu-v5p", "rtx-4090"):
        chip = get_hardware(chip_id)
        assert chip.devices_per_node is None and chip.intra_node_bytes_per_s is None


BASE = 'name = "x"\nmemory = "64GB"\nmemory_bandwidth = "1TB/s"\n'


def test_user_topology(tmp_path: Path) -> None:
    path = tmp_path / "pod.toml"
    path.write_text(BASE + 'devices_per_node = 4\nintra_node_bandwidth = "100GB/s"\n'
                    'inter_node_bandwidth = "12.5GB/s"\nintra_node_latency = "1us"\n'
                    'inter_node_latency = "5us"\nnode_kind = "four on a board"\n'
                    'topology_source = "my lab"\n[dense]\nbf16 = "1TFLOP/s"\n'
                    '[sources]\ninter_node_latency = "measured"\n')
    chip = get_hardware(str(path))
    assert (chip.devices_per_node, chip.intra_node_bytes_per_s, chip.inter_node_bytes_per_s,
            chip.intra_node_latency_s, chip.inter_node_latency_s) == (
        4, 100e9, 12.5e9, pytest.approx(1e-6), pytest.approx(5e-6))
    assert chip.node_kind == "four on a board"
    assert chip.source("intra_node_bandwidth") == "my lab"
    assert chip.source("inter_node_latency") == "measured"  # [sources] names it more closely


@pytest.mark.parametrize(("lines", "fragment"), [
    ("devices_per_node = 0\n", "devices_per_node must be a whole number from 1 to 65536"),
    ('devices_per_node = "8"\n', "devices_per_node must be a whole number"),
    ("devices_per_node = true\n", "devices_per_node must be a whole number"),
    ('intra_node_bandwidth = "fast"\n', "intra_node_bandwidth"),
    ('intra_node_bandwidth = "400Gb/s"\n', "bits or bytes"),
    ("intra_node_bandwidth = [1]\n", "must be a quantity such as \"450GB/s\", not an array"),
    ('inter_node_bandwidth = "50GB/s"\n', "inter_node_bandwidth needs devices_per_node"),
    ('intra_node_latency = "2s"\n', "intra_node_latency = '2s' is out of range"),
    ('inter_node_latency = "0us"\n', "out of range"),
    ("node_kind = 3\n", "node_kind must be a string, not a number"),
    ("topology_source = false\n", "topology_source must be a string, not a boolean"),
    ("inter_node_kind = {}\n", "inter_node_kind must be a string, not a table"),
    ("intra_node_links = 3\n", "unknown key 'intra_node_links'"),
])
def test_topology_errors(tmp_path: Path, lines: str, fragment: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE + lines + '[dense]\nbf16 = "1TFLOP/s"\n')
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace("[", r"\[")):
        get_hardware(str(path))


def test_hardware_command_shows_the_topology(cli) -> None:  # type: ignore[no-untyped-def]
    shown = cli("hardware", "h100").stdout
    for fragment in ("450 GB/s", "│ 50 GB/s", "hop latency between nodes", "2.7 µs",
                     "node topology source: NVIDIA DGX H100"):
        assert fragment in " ".join(shown.split()), fragment
    chip = cli("hardware", "h100", "--json").json()["chip"]
    assert (chip["devices_per_node"], chip["intra_node_bytes_per_s"],
            chip["inter_node_bytes_per_s"]) == (8, 450e9, 50e9)
    assert "node topology" not in cli("hardware", "tpu-v5e").stdout
