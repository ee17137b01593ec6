"""The CLI's lab commands: scenario (a scenario file on the running testbed) and report."""

from __future__ import annotations

from controller.advice import MODES
from lab.experiment import run_on_testbed
from lab.report import last_report, report_table
from lab.scenario import ScenarioError, load_scenario
from testbed.cli.base import Commands


class LabCommands(Commands):
    """Scenarios on the running testbed and their reports: scenario, report."""

    def do_scenario(self, line: str) -> None:
        """scenario FILE [modes=none,advice]: run a scenario file's jobs and faults on this testbed, once per
        mode (its topology must be this one), and write its report (see `report`)."""
        words = line.split()
        if not words:
            self.stdout.write("scenario: give a scenario file, e.g. scenario experiments/demo.yaml\n")
            return
        try:
            scenario = load_scenario(words[0])
            for word in words[1:]:
                key, _, value = word.partition("=")
                if key != "modes" or not value:
                    raise ScenarioError(f"{word!r}: the only option is modes=a,b")
                scenario.modes = value.split(",")
                bad = [m for m in scenario.modes if m not in MODES]
                if bad:
                    raise ScenarioError(f"modes: {', '.join(bad)} not one of {', '.join(MODES)}")
            result = run_on_testbed(self.tb, scenario, progress=self.say)
        except ScenarioError as exc:
            self.stdout.write(f"scenario: {exc}\n")
            return
        self.stdout.write("\n" + report_table(result.out_dir / "report.md") + "\n")

    def do_report(self, line: str) -> None:
        """report: the first table of the last scenario report (under runs/), and where it is."""
        path = last_report()
        if path is None:
            self.stdout.write("report: no scenario report yet (scenario FILE, or make demo)\n")
            return
        self.stdout.write(f"{path}\n\n{report_table(path)}\n")
