# Laid out like prom/node-exporter: /bin/node_exporter, user nobody, port 9100.
ARG TOOLS_IMAGE
FROM ${TOOLS_IMAGE}
RUN ln -s /usr/bin/prometheus-node-exporter /bin/node_exporter
USER nobody
EXPOSE 9100
ENTRYPOINT ["/bin/node_exporter"]
