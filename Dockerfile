# Builds one minimal, non-root image with the outbox-relay binary (run,
# migrate, healthcheck, ...) and the example order service (/orders).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN mkdir /out && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/outbox-relay ./examples/orders

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outbox-relay /outbox-relay
COPY --from=build /out/orders /orders
USER nonroot
EXPOSE 9464
# No shell in this image: healthchecks run `/outbox-relay healthcheck`
# (GET /readyz on OUTBOX_METRICS_ADDR, or --live for /healthz).
ENTRYPOINT ["/outbox-relay"]
CMD ["run"]
