# StarNet testbed. `make run` and `make test` are the two doors; see README.md.
SHELL := /bin/bash
PYTHON ?= python3
# The venv: .venv in the repository, or the directory /etc/starnet/venv names (the Vagrant VM keeps
# its venv off the shared folder, where the host may keep a .venv of its own; vm/provision.sh).
VENV := $(or $(shell cat /etc/starnet/venv 2>/dev/null),.venv)
PY := $(VENV)/bin/python
PROMETHEUS := $(VENV)/prometheus/usr/bin/prometheus
APT_PACKAGES := mininet iproute2 iperf iperf3 iputils-ping ethtool python3-venv
# For the tests of the VM's files (Vagrantfile, vm/provision.sh)
APT_PACKAGES += ruby shellcheck
# Open MPI and its mpi4py, for MPI jobs of your own (python -m testbed job --mpi; examples/mpi_allreduce.py)
APT_PACKAGES += openmpi-bin python3-mpi4py
# The browser the live page's test drives (Playwright for Python, pointed at /usr/bin/chromium)
APT_PACKAGES += chromium
# Cluster mode: a server's sshd (the test's second server is a namespace running one; on a systemd
# machine installing openssh-server also starts it there) and sudo, through which Mininet's cluster
# engine runs every command on a server; bindfs, through which the namespace server sees the run
# directory as a second machine sees it over NFS (a file system of another kind: no Unix socket of this
# machine is reached through it)
APT_PACKAGES += openssh-server sudo bindfs
# The live page's libraries (Cytoscape.js, uPlot), from the npm registry as web/package-lock.json pins them
WEB_LIBS := web/node_modules/.package-lock.json
TOPO ?= leafspine
DATAPLANE ?= auto
# MODE: none | ecn | advice | bbr
MODE ?= none
SW ?= s1
ELECTION ?= 0,1

.PHONY: deps apt venv run test test-unit test-integration test-repeat fuzz clean p4 shell bench lint proto reference demo diagnose-eval

# The venv, and p4runtime-shell in a venv of its own (make shell; a test drives it against a soft switch)
deps: apt venv $(VENV)-shell/.installed $(PROMETHEUS) $(WEB_LIBS)

$(WEB_LIBS): web/package.json web/package-lock.json
	@command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm; }
	npm ci --prefix web --no-audit --no-fund --loglevel=error
	@touch $@

# Prometheus (Debian's build) for the /metrics test and for users' scrapes: its binary only, unpacked
# from the package into the venv. Installing the package would start a daemon on every address.
$(PROMETHEUS):
	@mkdir -p $(VENV)/prometheus
	@cd $(VENV)/prometheus && rm -f prometheus_*.deb && \
	  { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; } && \
	  dpkg-deb -x prometheus_*.deb . && rm -f prometheus_*.deb
	@$@ --version | head -1

apt:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,plot,torch]'
	@# Expose Debian's mininet and mpi4py packages (and only them) to the venv, so the venv takes no
	@# PyPI mininet, and mpi4py is the one built against Debian's Open MPI.
	@mkdir -p $(VENV)/debian-mininet
	@ln -sfn /usr/lib/python3/dist-packages/mininet $(VENV)/debian-mininet/mininet
	@ln -sfn /usr/lib/python3/dist-packages/mpi4py $(VENV)/debian-mininet/mpi4py
	@$(PY) -c 'import site,sys; open(site.getsitepackages()[0]+"/debian-mininet.pth","w").write(sys.prefix+"/debian-mininet\n")'
	@touch $@

run: deps
	$(PY) -m testbed run --topo $(TOPO) --dataplane $(DATAPLANE) --mode $(MODE) $(if $(LINK_MBPS),--link-mbps $(LINK_MBPS)) $(if $(SERVERS),--servers $(SERVERS)) $(if $(SSH_KEY),--ssh-key $(SSH_KEY))

test: deps lint
	$(PY) -m pytest tests

test-unit: deps
	$(PY) -m pytest tests/unit

test-integration: deps
	$(PY) -m pytest tests/integration tests/dataplane

# Coverage-guided fuzzing (atheris), each target SECONDS long (make test runs them for 60 s).
SECONDS ?= 600
fuzz: deps
	FUZZ_SECONDS=$(SECONDS) $(PY) -m pytest -s tests/fuzz

# The integration tier N times, then a pass count per test (exit 1 unless every test passed N of N).
N ?= 5
test-repeat: deps
	$(PY) tools/test_repeat.py $(N)

# The headline experiment: experiments/demo.yaml in modes none, ecn and advice, report in runs/<time>-scenario-demo/
demo: deps
	$(PY) -m testbed scenario experiments/demo.yaml $(if $(MODES),--modes $(MODES)) $(if $(SHORT),--short $(SHORT))

# Fault localisation's evaluation: randomised fault trials under all-reduce load, table in the run directory
TRIALS ?= 60
diagnose-eval: deps
	$(PY) -m testbed diagnose-eval --trials $(TRIALS)

# ns-3 (PyPI, pinned in pyproject.toml) and the incast in it: the reference bench/incast_fidelity.py
# takes with --reference runs/<time>-ns3-incast/results.json
reference: deps
	$(PY) -m pip install -q -e '.[reference]'
	$(PY) experiments/reference/incast_ns3.py

bench: deps
	$(PY) bench/softswitch_pps.py
	$(PY) bench/fidelity_capacity.py
	$(PY) bench/advisor_scale.py
	$(PY) bench/advice_latency.py
	$(PY) bench/allreduce_busbw.py
	$(PY) bench/incast_fidelity.py
	$(PY) bench/p4rt_soak.py
	$(PY) bench/failover.py
	$(PY) bench/paths_reaction.py
	$(PY) bench/own_jobs.py
	$(PY) bench/collectives.py
	$(PY) bench/cluster_split.py
	$(PY) bench/controller_scale.py

# ruff, mypy on the packages (untyped defs refused) and the layers' import contracts (import-linter:
# imports only downward, no circle); config in pyproject.toml. Part of `make test`.
lint: deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# The advice API's generated code and its type stubs (mypy-protobuf), committed beside
# wire/advice.proto (a unit test checks they match).
proto: deps
	$(PY) -m grpc_tools.protoc -I. --plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy \
	  --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc \
	  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. wire/advice.proto

clean:
	@if [ -x $(PY) ]; then $(PY) -m testbed clean; else echo "nothing to clean (no venv)"; fi

p4:
	@if command -v p4c-bm2-ss >/dev/null; then \
	  mkdir -p build && p4c-bm2-ss --std p4-16 --arch v1model -o build/starnet.json \
	    --p4runtime-files build/starnet.p4info.txtpb p4src/starnet.p4 && \
	  echo "wrote build/starnet.json, build/starnet.p4info.txtpb"; \
	else \
	  echo "make p4: p4c-bm2-ss not found on PATH, cannot compile p4src/starnet.p4 (install p4lang's p4c;" \
	       "the soft data plane needs no compiler: it reads p4src/starnet.p4info.txtpb)" >&2; \
	  exit 1; \
	fi

$(VENV)-shell/.installed: tools/requirements-shell.txt
	@test -x $(VENV)-shell/bin/python || $(PYTHON) -m venv $(VENV)-shell
	$(VENV)-shell/bin/pip install -q -r tools/requirements-shell.txt
	@touch $@

# Read-only by default: election id 0,1 is below the controller's, so the shell is a backup client
# and shows the switch's pipeline (fetched from the switch) without disturbing the controller.
# ELECTION=0,100 makes it primary and lets it write, taking over from the controller.
shell: deps $(VENV)-shell/.installed
	@addr=$$($(PY) -m testbed address $(SW)) || exit 1; \
	echo "p4runtime-shell on $(SW) at $$addr (election id $(ELECTION))"; \
	$(VENV)-shell/bin/python -m p4runtime_sh --grpc-addr $$addr --device-id $$($(PY) -m testbed device-id $(SW)) \
	  --election-id $(ELECTION)
