"""The incast check both targets run: advice vs none on one testbed, with margins (test_advice*.py).

Queue and drop bounds are asserted over the faithful 100 ms windows of the measurement (no switch
had a late event, emulation/fidelity.py); a measurement with fewer than 30% of its windows faithful
(lab.incast.MIN_FAITHFUL) is repeated once, then fails with the verdict. BMv2's tail drops are
counted nowhere, so on BMv2 the drop bound is not asserted (and the report says so); its queue,
fairness and utilisation are.
"""

from __future__ import annotations

from emulation.net import Testbed
from lab.incast import measure_faithfully, pacing_cleared, run_incast
from tests.integration.helpers import wait_until

P99_QUEUE_MAX = 10  # packets, faithful windows; the goal (5) is bench/incast_fidelity.py's
UTILISATION_MIN = 0.90  # η = 0.95 minus measurement noise
# Every flow within 30% of the mean goodput, and Jain >= 0.98 over all six. Equal advice does not give
# goodputs equal to 10% over 8 s of TCP behind HTB: in 1 of 3 repeats here five flows got 3.03 Mbit/s
# and one 3.78 (+20%; Jain 0.993) under the same 3.17 Mbit/s advice. A starved flow (−35% or worse)
# still fails both.
FAIR_SHARE_TOLERANCE = 0.30


def check_incast_advice_vs_none(fabric: Testbed) -> None:
    """Incast 6→1 in advice mode, then in none: advice holds the bottleneck queue down with fair,
    full shares; without it the queue is longer."""
    advice = measure_faithfully(lambda: run_incast(fabric, "advice", "-advice"), lambda r: r.verdict,
                                who_else=fabric.who_took_the_machine)
    fabric.set_mode("none")
    try:
        assert wait_until(lambda: pacing_cleared(fabric), 5.0), \
            "advice was not cleared within 5 s of mode none"
        plain = run_incast(fabric, "none", "-none")
    finally:
        fabric.set_mode("advice")
    a, n = advice.summary(), plain.summary()
    print(f"\n  incast 6->1 on {fabric.dataplane}, 20 Mbit/s bottleneck    advice     none")
    for key in ("p99_queue_faithful", "p90_queue_faithful", "p99_queue_all", "drops_faithful", "jain",
                "utilisation_faithful", "readings_faithful", "faithful_share"):
        print(f"  {key:34} {a[key]!s:>8} {n[key]!s:>8}")
    print(f"  drops in flagged windows (t: drops) advice {a['drops_flagged']}  none {n['drops_flagged']}")
    print(f"  advice: {a['fidelity']}\n  none:   {n['fidelity']}")
    assert len(advice.queues_faithful) > 30, a
    assert advice.p(0.99) <= P99_QUEUE_MAX, a
    if advice.drops_measured:
        assert advice.drops_faithful == 0, a
    else:
        print("  drops: not measured (BMv2 counts its queue's tail drops nowhere)")
    assert advice.p(0.99) < plain.p(0.99, faithful=False), (a, n)
    mean = sum(advice.rates) / len(advice.rates)
    assert all(abs(r - mean) <= FAIR_SHARE_TOLERANCE * mean for r in advice.rates), advice.rates
    assert advice.jain >= 0.98, a
    assert advice.utilisation >= UTILISATION_MIN, a
