# The relay's image: /outbox-relay (run, migrate, healthcheck, ...), the
# production build (-tags nolab: no dev, no bench, no example service; see
# docs/deploy.md), static and non-root. `docker build .` builds it.
# The target `example` adds the example order service (/orders) for
# docker-compose.yml: `docker build --target example .`.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN mkdir /out && CGO_ENABLED=0 go build -tags nolab -trimpath -ldflags="-s -w" -o /out/outbox-relay ./cmd/outbox-relay

FROM build AS build-example
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/orders ./examples/orders

FROM gcr.io/distroless/static-debian12:nonroot AS relay
COPY --from=build /out/outbox-relay /outbox-relay
USER nonroot
EXPOSE 9464
# No shell in this image: healthchecks run `/outbox-relay healthcheck`
# (GET /readyz on OUTBOX_METRICS_ADDR, or --live for /healthz).
ENTRYPOINT ["/outbox-relay"]
CMD ["run"]

# The relay's image and the example order service, a binary of its own
# (the relay does not link it): docker-compose.yml's one image.
FROM relay AS example
COPY --from=build-example /out/orders /orders

# The default target: the relay alone.
FROM relay
