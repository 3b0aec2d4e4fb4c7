"""Expert parallelism by hand (issue 42's mutation run of
``tensorledger.workload.expert_parallel``): which modules are experts, what a rank keeps, the
dispatch's order, counts and splits, the combine's weighting, and the whole model's count.
The all-to-alls are a stand-in of EP ranks that all route alike (what the fake group assumes):
rank ``me`` receives, from each rank, the chunk it itself sends to rank ``me``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from tensorledger.errors import InputError, TraceError
from tensorledger.models import get_preset
from tensorledger.models.moe import RoutedExperts
from tensorledger.workload import expert_parallel as ep
from tensorledger.workload.expert_parallel import (
    ExpertShard,
    apply_expert_parallel,
    expert_modules,
    expert_parameters,
    global_numel,
    is_experts,
    whole_params,
)


class Experts(nn.Module):
    """Stacked experts called as transformers' are: (hidden, index, weights) → hidden · 10^e
    per slot of expert e (local ids), so each slot's expert shows in its output."""

    def __init__(self, experts: int = 4, d: int = 1) -> None:
        super().__init__()
        self.num_experts = experts
        self.up = nn.Parameter(torch.arange(experts * d * 2, dtype=torch.float32).reshape(
            experts, d, 2))
        self.bias = nn.Parameter(torch.zeros(experts, 2))
        self.calls: list[tuple[Any, ...]] = []

    def forward(self, hidden: torch.Tensor, index: torch.Tensor,
                weights: torch.Tensor) -> torch.Tensor:
        self.calls.append((hidden, index, weights))
        return hidden * 10.0 ** index.float() * weights


GROUP = object()  # the ep group every collective must be issued on


class Alike:
    """``all_to_all_single`` of ``ranks`` ranks that send alike, seen from rank ``me``: the
    floating rows from rank r are this rank's own chunk for ``me`` plus 100 · r, so the source
    of every row shows (counts, whole numbers, arrive as they are)."""

    def __init__(self, ranks: int, me: int) -> None:
        self.ranks, self.me = ranks, me
        self.calls: list[tuple[list[int] | None, list[int] | None]] = []
        self.sizes: list[int] = []

    def __call__(self, tensor: torch.Tensor, output_splits: list[int] | None,
                 input_splits: list[int] | None, group: Any) -> torch.Tensor:
        assert group is GROUP
        self.calls.append((output_splits, input_splits))
        self.sizes.append(tensor.shape[0])
        splits = input_splits or [tensor.shape[0] // self.ranks] * self.ranks
        assert sum(splits) == tensor.shape[0]
        mine = torch.split(tensor, splits)[self.me]
        marked = [mine + 100 * r if mine.is_floating_point() else mine
                  for r in range(self.ranks)]
        return torch.cat(marked)


@pytest.fixture
def alike(monkeypatch: pytest.MonkeyPatch) -> Alike:
    from torch.distributed import _functional_collectives as funcol

    exchange = Alike(2, 0)
    monkeypatch.setattr(funcol, "all_to_all_single", exchange)
    monkeypatch.setattr(funcol, "wait_tensor", lambda t: t)
    return exchange


# ---- which modules are experts ------------------------------------------------------------

def test_experts_have_a_count_every_own_parameter_leads_with_and_a_stacked_matrix() -> None:
    assert is_experts(Experts())
    routed = RoutedExperts(8, get_preset("tiny-moe").moe)  # type: ignore[arg-type]
    assert is_experts(routed)  # the reference kind, whatever its attributes
    for count in (None, True, 0, -4, 4.0, "4"):
        module = Experts()
        module.num_experts = count  # type: ignore[assignment]
        assert not is_experts(module), count
    router = Experts()
    del router.up  # (E, 2) biases alone: a router's shape, no stacked matrix
    assert not is_experts(router)
    other = Experts()
    other.extra = nn.Parameter(torch.zeros(3, 4, 2))  # a matrix not led by E = 4
    assert not is_experts(other)
    scalar = Experts()
    scalar.scale = nn.Parameter(torch.zeros(()))  # a 0-d parameter leads with nothing
    assert not is_experts(scalar)
    empty = nn.Module()
    empty.num_experts = 4
    assert not is_experts(empty)  # no parameters at all
    one = Experts(experts=1)
    assert is_experts(one)  # a single expert is a block too
    none_param = Experts()
    none_param.register_parameter("missing", None)
    assert is_experts(none_param)  # an empty slot is not a parameter


def test_the_expert_count_is_the_attribute_or_the_reference_gates_rows() -> None:
    moe = get_preset("tiny-moe").moe
    assert moe is not None
    assert ep._expert_count(RoutedExperts(8, moe)) == 6  # tiny-moe: 6 experts
    assert ep._expert_count(Experts(experts=4)) == 4


def test_experts_and_their_parameters_are_named_in_module_order() -> None:
    first, second = Experts(), Experts()
    model = nn.Sequential(nn.Linear(2, 2), first, nn.Sequential(second))
    assert expert_modules(model) == [("1", first), ("2.0", second)]
    assert [name for name, _ in expert_parameters(model)] == ["1.up", "1.bias", "2.0.up",
                                                              "2.0.bias"]
    assert [name for name, _ in expert_parameters(Experts())] == ["up", "bias"]  # the root


# ---- the shard's arithmetic ---------------------------------------------------------------

def _shard(experts: int = 4, local: int = 2, first: int = 0, **fields: Any) -> ExpertShard:
    return ExpertShard(name="moe", experts=experts, local=local, first=first, group=GROUP,
                       fake=fields.pop("fake", True), **fields)


def test_the_slots_per_rank_sum_each_ranks_experts() -> None:
    shard = _shard(experts=6, local=2)
    assert shard.ranks == 3  # 6 experts, 2 a rank
    assert shard._per_rank([1, 2, 3, 4, 5, 6]) == [3, 7, 11]  # 1+2, 3+4, 5+6


@pytest.mark.parametrize("fake", [True, False])
def test_the_counts_exchange_tells_each_rank_what_it_sends_and_receives(
        alike: Alike, fake: bool) -> None:
    alike.me = 1
    shard = _shard(first=2, fake=fake)  # rank 1 of 2 holds experts 2 and 3
    received_counts, sent, received = shard._exchange(torch.tensor([3, 1, 1, 2]))
    # both ranks send rank 1 what this one does: 1 slot for expert 2, 2 for expert 3
    assert received_counts.tolist() == [1, 2, 1, 2]
    assert sent == [4, 3]  # 3 + 1 to rank 0, 1 + 2 to rank 1
    assert received == [3, 3]  # 1 + 2 from each rank
    assert alike.calls == [(None, None)]  # the counts in equal parts


def test_counts_without_values_are_refused(alike: Alike) -> None:
    class NoValues(torch.Tensor):
        def tolist(self) -> Any:
            raise RuntimeError("no values")

    counts = torch.tensor([1, 1, 1, 1]).as_subclass(NoValues)
    with pytest.raises(TraceError, match=r"the token counts of moe's experts have no values "
                                         r"\(RuntimeError\)"):
        _shard()._exchange(counts)


def test_the_dispatch_sorts_the_slots_by_expert_and_sends_each_rank_its_run(
        alike: Alike) -> None:
    shard = _shard()
    hidden = torch.tensor([[1.0], [2.0], [3.0]])  # 3 tokens of width 1
    index = torch.tensor([[0, 3], [2, 0], [1, 0]])  # each token's 2 experts
    weights = torch.tensor([[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]], dtype=torch.bfloat16)
    (arrived, ids, ones, *rest), done = shard.dispatch((hidden, index, weights, "extra"))
    # the 6 slots' experts 0 3 2 0 1 0; by expert (stable): slots 0 3 5 | 4 | 2 | 1
    assert done.order is not None and done.order.tolist() == [0, 3, 5, 4, 2, 1]
    assert (done.tokens, done.chosen, done.weights is weights) == (3, 2, True)
    # counts 3 1 1 1: rank 0 is sent 3 + 1, rank 1 is sent 1 + 1; from each rank 3 + 1 come
    assert (done.sent, done.received) == ([4, 2], [4, 4])
    # the tokens of the first 4 sorted slots (0 3 5 4 → tokens 0 1 2 2), from both ranks
    assert arrived.flatten().tolist() == [1.0, 2.0, 3.0, 3.0, 101.0, 102.0, 103.0, 103.0]
    assert alike.calls == [(None, None), ([4, 4], [4, 2])]  # the counts, then the slots
    assert alike.sizes == [4, 6]  # 4 experts' counts; 6 slots
    # local expert ids by arrival: 3 slots of expert 0, 1 of expert 1, from each rank
    assert ids.flatten().tolist() == [0, 0, 0, 1, 0, 0, 0, 1] and tuple(ids.shape) == (8, 1)
    assert ones.dtype == torch.bfloat16 and ones.flatten().tolist() == [1.0] * 8
    assert rest == ["extra"]


def test_a_dispatch_needs_hidden_index_and_weights() -> None:
    with pytest.raises(TraceError, match="it was called with 2 positional arguments"):
        _shard().dispatch((torch.zeros(1, 1), torch.zeros(1, 1)))


def test_the_combine_puts_slots_back_in_token_order_and_weighs_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the slots come home in sorted order 0 3 5 4 2 1 (see the dispatch above), valued
    # (1, -1) … (6, -6), in bf16
    back = torch.tensor([[v, -v] for v in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)],
                        dtype=torch.bfloat16)
    calls: list[tuple[list[int], list[int], Any]] = []

    def home(tensor: torch.Tensor, output_splits: list[int], input_splits: list[int],
             group: Any) -> torch.Tensor:
        calls.append((output_splits, input_splits, group))
        return back

    monkeypatch.setattr(ep, "_all_to_all", home)
    done = ep._Dispatched(order=torch.tensor([0, 3, 5, 4, 2, 1]),
                          weights=torch.tensor([[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]]),
                          tokens=3, chosen=2, sent=[4, 2], received=[4, 4])
    out = _shard().combine(torch.zeros(8, 2, dtype=torch.bfloat16), done)
    # slot s holds back[i] where order[i] = s: slots 0..5 = 1 6 5 2 4 3
    # token 0: 0.5·1 + 0.5·6 = 3.5; token 1: 0.25·5 + 0.75·2 = 2.75; token 2: 1·4 + 0·3 = 4
    assert out.tolist() == [[3.5, -3.5], [2.75, -2.75], [4.0, -4.0]]
    assert out.dtype == torch.bfloat16  # the weights cast to the slots' dtype
    assert calls == [([4, 2], [4, 4], GROUP)]  # the splits swapped: home again


def test_a_routed_block_runs_its_local_experts_between_dispatch_and_combine(
        alike: Alike) -> None:
    alike.ranks = 1  # one ep rank: every all-to-all hands the slots back as they are
    module = Experts(experts=2)
    ep._route_through(module, _shard(experts=2, local=2))
    hidden = torch.tensor([[1.0], [2.0], [3.0]])
    index = torch.tensor([[0, 1], [1, 0], [0, 0]])
    weights = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.25, 0.25]])
    out = module(hidden, index, weights)
    ((got_hidden, got_ids, got_weights),) = module.calls
    assert got_weights.flatten().tolist() == [1.0] * 6  # the routing weighs after the combine
    # slots by expert: expert 0 ← slots 0 3 4 5 (tokens 0 1 2 2), expert 1 ← slots 1 2
    assert got_hidden.flatten().tolist() == [1.0, 2.0, 3.0, 3.0, 1.0, 2.0]
    assert got_ids.flatten().tolist() == [0, 0, 0, 0, 1, 1]
    # hidden · 10^expert, weighed: 0.5·1 + 0.5·10 = 5.5; 1·20 + 0·2 = 20; 0.25·3 · 2 = 1.5
    assert out.flatten().tolist() == [5.5, 20.0, 1.5]
    # called by keyword: bound to the forward's names first
    module.calls.clear()
    by_name = module(hidden=hidden, index=index, weights=weights)
    assert torch.equal(by_name, out) and len(module.calls) == 1


def test_a_call_that_does_not_bind_is_refused_by_the_dispatch(alike: Alike) -> None:
    module = Experts()
    ep._route_through(module, _shard())
    with pytest.raises(TraceError, match="called with 1 positional arguments"):
        module(torch.zeros(1, 1), wrong=torch.zeros(1, 1))


# ---- the reference experts: sorted slots and capacity buffers ------------------------------

def test_sorted_slots_go_to_their_ranks_and_are_regrouped_by_local_expert(
        alike: Alike) -> None:
    shard = _shard(sorted_slots=True)
    slots = torch.arange(12.0).reshape(6, 2)  # rows (0, 1) … (10, 11); counts 2 1 2 1
    (mine, counts, *rest), done = shard.dispatch((slots, torch.tensor([2, 1, 2, 1]), "x"))
    assert (done.sent, done.received) == ([3, 3], [3, 3])  # 2 + 1 each way
    assert alike.calls == [(None, None), ([3, 3], [3, 3])]
    # arrived: rows 0 1 2 from rank 0, the same + 100 from rank 1; regrouped by expert:
    # expert 0's rows 0 1 from each rank, then expert 1's row 2 from each
    assert done.order is not None and done.order.tolist() == [0, 1, 3, 4, 2, 5]
    assert mine[:, 0].tolist() == [0.0, 2.0, 100.0, 102.0, 4.0, 104.0]
    assert counts.tolist() == [4, 2] and rest == ["x"]  # 2 + 2 and 1 + 1 slots
    assert done.weights is None and done.padded is None
    # the combine undoes the regrouping (arrival order again) and sends them home
    back = shard.combine(mine, done)
    assert alike.calls[-1] == ([3, 3], [3, 3])
    assert back[:, 0].tolist() == [0.0, 2.0, 4.0, 100.0, 102.0, 104.0]


def test_one_local_expert_needs_no_regrouping(alike: Alike) -> None:
    shard = _shard(experts=2, local=1, sorted_slots=True)
    slots = torch.arange(3.0).reshape(3, 1)
    (mine, counts), done = shard.dispatch((slots, torch.tensor([2, 1])))
    assert done.order is None and mine.flatten().tolist() == [0.0, 1.0, 100.0, 101.0]
    assert counts.tolist() == [4]
    back = shard.combine(mine, done)
    assert alike.calls[-1] == ([2, 1], [2, 2])  # 2 + 1 sent home; 2 from each rank back
    assert back.flatten().tolist() == [0.0, 1.0, 100.0, 101.0]


@pytest.mark.parametrize("counts", [(), (None,)])
def test_a_capacity_buffer_sends_each_rank_its_experts_whole(
        alike: Alike, counts: tuple[Any, ...]) -> None:
    shard = _shard(experts=6, local=3, sorted_slots=True)
    buffer = torch.arange(24.0).reshape(6, 2, 2)  # 6 experts × capacity 2, width 2
    (mine,), done = shard.dispatch((buffer, *counts))
    # 3 local experts × 2 slots = 6 rows to each rank
    assert (done.sent, done.received, done.padded) == ([6, 6], [6, 6], (6, 2, 2))
    assert alike.calls == [([6, 6], [6, 6])]
    # rank 0's experts 0 1 2, each: its 2 slots from rank 0, then from rank 1 (+ 100)
    assert tuple(mine.shape) == (3, 4, 2)
    assert mine[..., 0].tolist() == [[4 * e + v for v in (0.0, 2.0, 100.0, 102.0)]
                                     for e in range(3)]
    back = shard.combine(mine, done)
    assert alike.calls[-1] == ([6, 6], [6, 6])
    # home: the first 3 experts' slots as this rank holds them, the last 3 from rank 1
    assert tuple(back.shape) == (6, 2, 2)
    assert back.flatten().tolist() == [*range(12), *range(100, 112)]


def test_by_expert_regroups_runs_from_each_rank() -> None:
    # rank 0: expert 0 ×2 (rows 0 1), expert 1 ×1 (row 2); rank 1: expert 0 ×1 (row 3),
    # expert 1 ×2 (rows 4 5) → expert 0: 0 1 3; expert 1: 2 4 5
    assert ep._by_expert(torch.tensor([[2, 1], [1, 2]]), 6).tolist() == [0, 1, 3, 2, 4, 5]


# ---- counting the whole model -------------------------------------------------------------

def test_global_numel_reads_a_local_tensors_spec() -> None:
    local = torch.zeros(2, 3)
    local._st_info = type("Spec", (), {"shape": (4, 3)})()  # type: ignore[attr-defined]
    assert global_numel(local) == 12  # 4 · 3, not the local 6
    spec_less = torch.zeros(5)
    spec_less._st_info = object()  # type: ignore[attr-defined]
    assert global_numel(spec_less) == 5


def test_whole_params_count_each_expert_block_on_every_rank(alike: Alike) -> None:
    from tensorledger.workload.parallel import fake_process_group

    model = nn.Sequential(nn.Linear(2, 3), Experts())  # 9 + (4·1·2 + 4·2) = 9 + 16
    with fake_process_group(2):
        from torch.distributed.device_mesh import init_device_mesh

        apply_expert_parallel(model, init_device_mesh("cpu", (2,)))
    # the rank keeps 2 of 4 experts: 8 values; counted twice, 9 + 8 · 2 = 25
    assert whole_params(model) == 25
    assert whole_params(model, [model[0].weight, model[0].weight]) == 6 + 8  # listed once
    # etp: each expert's width over 2 tp ranks too
    ep._SHARDS[model[1]].tp_ranks = 2
    assert whole_params(model) == 9 + 8 * 4
    # a child module inside the block is counted once, as any other module
    model[1].inner = nn.Linear(1, 1)  # 2 values
    assert whole_params(model) == 9 + 8 * 4 + 2


# ---- laying the experts out ---------------------------------------------------------------

def _mesh(ranks: int) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (ranks,))


def test_each_rank_keeps_its_run_of_experts() -> None:
    from tensorledger.workload.parallel import fake_process_group

    module = Experts()
    module.bias.requires_grad_(False)
    model = nn.Sequential(module)
    with fake_process_group(2, rank=1):
        (shard,) = apply_expert_parallel(model, _mesh(2))
    # rank 1 of 2: experts 2 and 3 of 4, up rows 4 5 | 6 7
    assert (shard.name, shard.experts, shard.local, shard.first) == ("0", 4, 2, 2)
    assert (shard.fake, shard.sorted_slots, shard.tp_group, shard.tp_ranks) == (
        True, False, None, 1)
    assert module.up.flatten().tolist() == [4.0, 5.0, 6.0, 7.0]
    assert module.num_experts == 2
    assert module.up.requires_grad and not module.bias.requires_grad
    assert ep._SHARDS[module] is shard
    with fake_process_group(2, rank=1):  # its forward now routes through the shard
        out = module(torch.ones(3, 1), torch.tensor([[2, 3]] * 3), torch.ones(3, 2))
    assert tuple(out.shape) == (3, 1)


def test_a_root_block_is_named_by_its_class_and_reference_experts_keep_their_count() -> None:
    from tensorledger.workload.parallel import fake_process_group

    moe = get_preset("tiny-moe").moe
    assert moe is not None
    routed = RoutedExperts(4, moe)
    routed.register_parameter("empty", None)
    with fake_process_group(3):
        (shard,) = apply_expert_parallel(Experts(experts=6), _mesh(3))
        (reference,) = apply_expert_parallel(nn.Sequential(routed), _mesh(3))
    assert (shard.name, shard.local) == ("Experts", 2)
    assert (reference.sorted_slots, reference.local, tuple(routed.gate.shape)) == (
        True, 2, (2, 4, 32))  # 6 experts over 3 ranks; d 4, width 32
    assert not hasattr(routed, "num_experts")


def test_expert_parallel_refusals() -> None:
    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(4):
        with pytest.raises(InputError, match="--ep 4 shards routed experts, and Linear has "
                                             "none"):
            apply_expert_parallel(nn.Linear(2, 2), _mesh(4))
        assert apply_expert_parallel(nn.Linear(2, 2), _mesh(4), required=False) == []
        with pytest.raises(InputError, match="--ep 4 does not divide the 6 experts of 0"):
            apply_expert_parallel(nn.Sequential(Experts(experts=6)), _mesh(4))
    with fake_process_group(4):
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("ep", "tp"))
        with pytest.raises(InputError, match=r"--etp 2 splits the reference models' routed "
                                             r"experts; 0 \(Experts\) is not one"):
            apply_expert_parallel(nn.Sequential(Experts()), mesh["ep"], tp=mesh["tp"])
        module = Experts()
        with pytest.raises(InputError, match=r"the model \(Experts\) is not one"):
            apply_expert_parallel(module, mesh["ep"], tp=mesh["tp"])
        assert module.up.shape[0] == 4  # refused before any block is cut


def test_the_dispatch_keeps_each_experts_slots_in_token_order(alike: Alike) -> None:
    torch.manual_seed(0)
    index = torch.randint(0, 4, (20, 2))  # 40 slots over 4 experts: many ties
    hidden = torch.arange(20.0).unsqueeze(-1)
    _, done = _shard().dispatch((hidden, index, torch.ones(20, 2)))
    assert done.order is not None
    flat = index.reshape(-1)
    for expert in range(4):
        run = [int(i) for i in done.order if flat[i] == expert]
        assert run == sorted(run), expert  # a stable sort: the tokens' order kept


def test_every_expert_is_counted_even_one_with_no_slot(alike: Alike) -> None:
    # 1 token choosing experts 0 and 1 of 4: counts 1 1 0 0 (experts 2 and 3 get none)
    _shard().dispatch((torch.ones(1, 1), torch.tensor([[0, 1]]), torch.ones(1, 2)))
    assert alike.sizes[0] == 4  # the counts of all 4 experts exchanged


def test_the_dispatch_makes_its_tensors_where_its_inputs_are(alike: Alike) -> None:
    with torch.device("meta"):  # a default device the inputs are not on
        (_, ids, ones), _ = _shard().dispatch((torch.ones(3, 1, device="cpu"),
                                               torch.tensor([[0, 1]] * 3, device="cpu"),
                                               torch.ones(3, 2, device="cpu")))
        order = ep._by_expert(torch.tensor([[1, 2], [3, 0]], device="cpu"), 6)
    assert (ids.device.type, ones.device.type, order.device.type) == ("cpu", "cpu", "cpu")


def test_a_blocks_own_parameters_alone_are_its_experts() -> None:
    module = Experts()
    module.inner = nn.Linear(2, 2)  # a child's parameters are not the block's own
    assert [name for name, _ in expert_parameters(module)] == ["up", "bias"]


class Scaled(Experts):
    """Experts with a keyword of their own: the output times ``scale``."""

    def forward(self, hidden: torch.Tensor, index: torch.Tensor, weights: torch.Tensor,
                scale: float = 1.0) -> torch.Tensor:
        return super().forward(hidden, index, weights) * scale


def _one_rank(alike: Alike) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    alike.ranks = 1  # one ep rank: every all-to-all hands the slots back as they are
    return (torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([[0, 1], [1, 0], [0, 0]]),
            torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.25, 0.25]]))


def test_keywords_reach_the_experts_forward_and_a_partial_call_is_bound(
        alike: Alike) -> None:
    hidden, index, weights = _one_rank(alike)
    module = Scaled(experts=2)
    ep._route_through(module, _shard(experts=2, local=2))
    # 5.5, 20, 1.5 on their own (see above), twice with scale 2
    assert module(hidden, index, weights, scale=2.0).flatten().tolist() == [11.0, 40.0, 3.0]
    # the hidden state by position, the rest by name: bound to (hidden, index, weights)
    assert module(hidden, index=index, weights=weights).flatten().tolist() == [5.5, 20.0, 1.5]


def test_expert_tensor_parallel_runs_the_forward_on_width_shards(
        alike: Alike, monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorledger.workload.expert_tensor_parallel as etp

    hidden, index, weights = _one_rank(alike)
    tp_group = object()
    seen: list[tuple[str, tuple[float, ...], Any]] = []

    def to_shards(x: torch.Tensor, group: Any) -> torch.Tensor:
        seen.append(("to", tuple(x.flatten().tolist()), group))
        return x

    def from_shards(x: torch.Tensor, group: Any) -> torch.Tensor:
        seen.append(("from", tuple(x.flatten().tolist()), group))
        return x * 2  # the tp partial sums, added over 2 ranks alike

    monkeypatch.setattr(etp, "to_expert_shards", to_shards)
    monkeypatch.setattr(etp, "from_expert_shards", from_shards)
    module = Scaled(experts=2)
    ep._route_through(module, _shard(experts=2, local=2, tp_group=tp_group, tp_ranks=2))
    out = module(hidden, index, weights, scale=3.0)
    # the slots by expert (1 2 3 3 | 1 2) go to the width shards; the forward's output
    # (hidden · 10^expert · 3) comes back summed over the tp pair (× 2)
    assert seen[0] == ("to", (1.0, 2.0, 3.0, 3.0, 1.0, 2.0), tp_group)
    assert seen[1] == ("from", (3.0, 6.0, 9.0, 9.0, 30.0, 60.0), tp_group)
    # 2 · 3 · (5.5, 20, 1.5)
    assert out.flatten().tolist() == [33.0, 120.0, 9.0]


def test_a_one_dimensional_parameter_led_by_the_count_belongs_to_the_block() -> None:
    module = Experts()
    module.scale = nn.Parameter(torch.ones(4))  # one figure per expert
    assert is_experts(module)


def test_an_empty_slot_before_the_weights_is_passed_over() -> None:
    from tensorledger.workload.parallel import fake_process_group

    class Early(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.num_experts = 4
            self.register_parameter("none_yet", None)
            self.up = nn.Parameter(torch.arange(8.0).reshape(4, 1, 2))

        def forward(self, hidden: torch.Tensor, index: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
            return hidden

    module = Early()
    with fake_process_group(2, rank=1):
        apply_expert_parallel(nn.Sequential(module), _mesh(2))
    assert module.up.flatten().tolist() == [4.0, 5.0, 6.0, 7.0]  # experts 2 and 3


def test_an_ep_dimension_beside_another_runs_on_its_own_group() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from tensorledger.workload.parallel import fake_process_group

    with fake_process_group(4):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("ep", "fsdp"))
        (shard,) = apply_expert_parallel(nn.Sequential(Experts()), mesh["ep"])
        assert shard.group is mesh["ep"].get_group()
        assert shard.group is not torch.distributed.group.WORLD


def test_a_width_the_tp_ranks_do_not_divide_names_the_block() -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from tensorledger.workload.parallel import fake_process_group

    moe = get_preset("tiny-moe").moe
    assert moe is not None
    with fake_process_group(6):
        mesh = init_device_mesh("cpu", (2, 3), mesh_dim_names=("ep", "tp"))
        # tiny-moe's experts are 32 wide: 3 tp ranks do not divide them
        with pytest.raises(InputError, match="expert width 32 of 0"):
            apply_expert_parallel(nn.Sequential(RoutedExperts(4, moe)), mesh["ep"],
                                  tp=mesh["tp"])
