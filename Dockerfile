# syntax=docker/dockerfile:1
# rowbranch's image: built with the locked dependencies, then run as a non-root user on a runtime
# that holds glibc, libgcc and CA certificates and nothing else (no shell, no package manager).
# The CA certificates are GitHub's trust: octocrab checks TLS against the system's roots. No git:
# the image serves the GitHub forge; the local forge, which runs git, is for `demo` and the tests.
# docs/deploy.md shows how to run it; .ci/run lints this file and runs the same cargo build.

# The toolchain CI builds and tests with, on the Debian release the runtime is made from.
FROM rust:1.95-slim-trixie AS build
WORKDIR /src
COPY . .
# The commit `rowbranch --version` names: the build context has no .git to read it from.
ARG ROWBRANCH_BUILD_COMMIT=""
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin rowbranch \
    && cp target/release/rowbranch /usr/local/bin/rowbranch

FROM gcr.io/distroless/cc-debian13:nonroot
COPY --from=build /usr/local/bin/rowbranch /usr/local/bin/rowbranch
# A config file mounted here is ./rowbranch.toml; without one, ROWBRANCH_CONFIG holds the whole
# config (docs/spec.md §2).
WORKDIR /etc/rowbranch
# rowbranch speaks plain HTTP on 0.0.0.0:$PORT; TLS is the platform's or a proxy's.
ENV PORT=8080
EXPOSE 8080
# No shell and no curl here, and an exec-form check cannot expand $PORT: `rowbranch healthcheck`
# finds serve's address as serve does and asks its /healthz (exit 0 healthy, 1 not).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/rowbranch", "healthcheck"]
# The image's `nonroot` user, by number so that a runtime can tell it is not root.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rowbranch"]
CMD ["serve"]
