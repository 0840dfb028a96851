# laneway container image for machines with registry access:
#
#   docker build -t laneway .        (or `docker compose up --build`)
#   docker run -p 9000:9000 -v laneway-data:/data \
#     -e LANEWAY_ACCESS_KEY=... -e LANEWAY_SECRET_KEY=... -e LANEWAY_ADMIN_TOKEN=... laneway
#
# Two stages: the Rust toolchain builds the release binary, a slim Debian of
# the same release (bookworm, so the glibc matches) runs it as the non-root
# user laneway (uid/gid 10001) over the volume /data. `laneway serve` reads
# LANEWAY_ACCESS_KEY / LANEWAY_SECRET_KEY (first key of a new data directory)
# and LANEWAY_ADMIN_TOKEN (admin API bearer token) from the environment; any
# other LANEWAY_* variable of `laneway serve --help` works the same way
# (the flags of CMD below win over LANEWAY_DATA_DIR, LANEWAY_LISTEN and
# LANEWAY_ADMIN_LISTEN).
#
# Health check (no shell or curl needed, the binary asks its own admin API
# with $LANEWAY_ADMIN_TOKEN):
#   healthcheck: { test: ["CMD", "laneway", "admin", "tenant", "list"] }
#
# The same image runs a cluster: docker-compose.yml (top level) gives it the
# commands `laneway cluster init`, `laneway store` (health check: `laneway
# cluster ping --file F --node ID`, one signed RPC call) and `laneway
# gateway`; `docker compose up --build` builds this file once for them all.
#
# The machines that build and test laneway have no registry, so this file is
# not built there: scripts/docker-image.sh makes the same image (same paths,
# user, ports, volume, entrypoint and command) from target/release/laneway
# with `docker import`, and conformance/test_container.py tests that one.
# Keep the two in step.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# The whole workspace: cargo needs every member's manifest (.dockerignore
# keeps target/ and the venvs out of the context).
COPY . .
RUN cargo build --release --locked -p laneway-gateway \
    && install -m 0755 target/release/laneway /usr/local/bin/laneway

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 laneway \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
       --shell /usr/sbin/nologin laneway \
    && mkdir -p /data \
    && chown 10001:10001 /data \
    && chmod 0750 /data
COPY --from=build /usr/local/bin/laneway /usr/local/bin/laneway
ENV NO_COLOR=1
USER 10001:10001
WORKDIR /data
VOLUME /data
# 9000: S3 API. 9001: admin API (tenants, keys, /metrics); publish it only
# where operators reach it.
EXPOSE 9000 9001
ENTRYPOINT ["/usr/local/bin/laneway"]
CMD ["serve", "--data-dir", "/data", "--listen", "0.0.0.0:9000", "--admin-listen", "0.0.0.0:9001"]
