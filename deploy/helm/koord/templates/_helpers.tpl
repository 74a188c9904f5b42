{{/* Name of a service's objects: <release>-<service>, within 63 characters. */}}
{{- define "koord.fullname" -}}
{{- printf "%s-%s" .root.Release.Name .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "koord.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: koord
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "koord.selectorLabels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "koord.image" -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .name (.root.Values.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}

{{/*
The services: values key, object name, Python module, env prefix, whether it reads
DATABASE_URL. The node-agent is the DaemonSet; the others are Deployments.
*/}}
{{- define "koord.services" -}}
- {key: nodeAgent, name: node-agent, module: node_agent, prefix: KOORD_AGENT_, database: false}
- {key: metricsCollector, name: metrics-collector, module: metrics_collector, prefix: KOORD_COLLECTOR_, database: true}
- {key: sloController, name: slo-controller, module: slo_controller, prefix: KOORD_SLO_, database: false}
- {key: schedulerExtender, name: scheduler-extender, module: scheduler_extender, prefix: KOORD_EXTENDER_, database: false}
- {key: descheduler, name: descheduler, module: descheduler, prefix: KOORD_DESCHEDULER_, database: false}
- {key: recommender, name: recommender, module: recommender, prefix: KOORD_RECOMMENDER_, database: true}
{{- end -}}

{{/* "true" when the service (ctx: root, name) checks bearer tokens with Kubernetes TokenReview:
api.auth tokenreview, on every service that serves an API (the node agent serves only probes). */}}
{{- define "koord.reviewsTokens" -}}
{{- and (eq .root.Values.api.auth "tokenreview") (ne .name "node-agent") -}}
{{- end -}}

{{- define "koord.databaseSecretName" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- printf "%s-database" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "koord.databaseSecretKey" -}}
{{- if .Values.database.existingSecret -}}{{ .Values.database.existingSecretKey }}{{- else -}}url{{- end -}}
{{- end -}}

{{- define "koord.hasDatabase" -}}
{{- if or .Values.database.existingSecret .Values.database.url -}}true{{- end -}}
{{- end -}}

{{/* Environment every service gets: bus, database (when it uses one), cluster, HTTP, logs. */}}
{{- define "koord.commonEnv" -}}
{{- $root := .root -}}
- name: NATS_URL
  value: {{ $root.Values.nats.url | quote }}
{{- if gt (int ($root.Values.nats.streamReplicas | default 1)) 1 }}
- name: NATS_STREAM_REPLICAS
  value: {{ $root.Values.nats.streamReplicas | quote }}
{{- end }}
{{- if and .svc.database (include "koord.hasDatabase" $root) }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "koord.databaseSecretName" $root }}
      key: {{ include "koord.databaseSecretKey" $root }}
{{- end }}
- name: {{ .svc.prefix }}CLUSTER_BACKEND
  value: kubernetes
- name: {{ .svc.prefix }}HTTP_HOST
  value: "0.0.0.0"
- name: {{ .svc.prefix }}HTTP_PORT
  value: {{ .values.port | quote }}
- name: {{ .svc.prefix }}LOG_LEVEL
  value: {{ $root.Values.logLevel | quote }}
- name: {{ .svc.prefix }}DATA_DIR
  value: /data
{{- with $root.Values.busNamespace }}
- name: {{ $.svc.prefix }}BUS_NAMESPACE
  value: {{ . | quote }}
{{- end }}
{{- if $root.Values.nats.auth.enabled }}
- name: NATS_NKEY_SEED_FILE
  value: /etc/koord/nats/identity.nk
{{- end }}
{{- if $root.Values.nats.tlsCASecret }}
- name: NATS_CA_FILE
  value: /etc/koord/nats-ca/ca.crt
{{- end }}
- name: {{ .svc.prefix }}API_AUTH
  value: {{ $root.Values.api.auth | quote }}
- name: {{ .svc.prefix }}API_ALLOWED_GROUPS
  value: {{ $root.Values.api.allowedGroups | toJson | quote }}
- name: {{ .svc.prefix }}API_ALLOWED_USERS
  value: {{ $root.Values.api.allowedUsers | toJson | quote }}
- name: {{ .svc.prefix }}API_PROTECT_READS
  value: {{ $root.Values.api.protectReads | quote }}
{{- end -}}

{{/* The bus identity and the NATS CA of a Deployment's service: mounts, then volumes. */}}
{{- define "koord.natsMounts" -}}
{{- if .Values.nats.auth.enabled }}
- name: nats-identity
  mountPath: /etc/koord/nats
  readOnly: true
{{- end }}
{{- if .Values.nats.tlsCASecret }}
- name: nats-ca
  mountPath: /etc/koord/nats-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "koord.natsVolumes" -}}
{{- if .root.Values.nats.auth.enabled }}
- name: nats-identity
  secret:
    secretName: {{ .root.Values.nats.auth.existingSecret }}
    defaultMode: 0400
    items:
      - key: {{ .service }}.nk
        path: identity.nk
{{- end }}
{{- if .root.Values.nats.tlsCASecret }}
- name: nats-ca
  secret:
    secretName: {{ .root.Values.nats.tlsCASecret }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end -}}

{{- define "koord.extraEnv" -}}
{{- range $k, $v := . }}
- name: {{ $k }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end -}}

{{- define "koord.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 6
readinessProbe:
  httpGet: {path: /readyz, port: http}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{- define "koord.podAnnotations" -}}
{{- if .root.Values.prometheusAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .values.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{- define "koord.webhookServiceName" -}}
{{- include "koord.fullname" (dict "root" . "name" "slo-controller") -}}
{{- end -}}

{{- define "koord.webhookSecretName" -}}
{{- printf "%s-webhook-tls" (include "koord.webhookServiceName" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
