{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "slo-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "slo-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "slo-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slo-gateway.labels" -}}
helm.sh/chart: {{ include "slo-gateway.chart" . }}
{{ include "slo-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "slo-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slo-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "slo-gateway.redis.fullname" -}}
{{- printf "%s-redis" (include "slo-gateway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slo-gateway.redis.labels" -}}
helm.sh/chart: {{ include "slo-gateway.chart" . }}
{{ include "slo-gateway.redis.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "slo-gateway.redis.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slo-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{- define "slo-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "slo-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Name of the Secret the chart creates (secrets.values and redis.external.url). */}}
{{- define "slo-gateway.secretName" -}}
{{- printf "%s-env" (include "slo-gateway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slo-gateway.externalRedisUrl" -}}
{{- if not .Values.redis.bundled.enabled }}{{ .Values.redis.external.url }}{{ end }}
{{- end }}

{{- define "slo-gateway.createsSecret" -}}
{{- if or .Values.secrets.values (include "slo-gateway.externalRedisUrl" .) }}true{{ end }}
{{- end }}

{{/* "true" when the replicas share state in Redis (bundled or external). */}}
{{- define "slo-gateway.hasRedis" -}}
{{- $ext := .Values.redis.external }}
{{- if or .Values.redis.bundled.enabled $ext.existingSecret $ext.url }}true{{ end }}
{{- end }}

{{/* The in-memory store is per replica: refuse more than one replica without Redis. */}}
{{- define "slo-gateway.validate" -}}
{{- if not (include "slo-gateway.hasRedis" .) }}
{{- if or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled }}
{{- fail "several gateway replicas need shared state: enable redis.bundled or set redis.external (existingSecret or url), or run replicaCount: 1 without autoscaling" }}
{{- end }}
{{- end }}
{{- if and (gt (int .Values.workers) 1) (not (include "slo-gateway.hasRedis" .)) }}
{{- fail "workers above 1 share state through Redis: enable redis.bundled or set redis.external (the image has no private Valkey)" }}
{{- end }}
{{- if and .Values.redis.bundled.enabled (or .Values.redis.external.existingSecret .Values.redis.external.url) }}
{{- fail "choose one Redis: redis.bundled.enabled or redis.external, not both" }}
{{- end }}
{{- end }}

{{/* GATEWAY_REDIS_URL (and the bundled Redis password it expands), as container env entries. */}}
{{- define "slo-gateway.redisEnv" -}}
{{- $bundled := .Values.redis.bundled }}
{{- $ext := .Values.redis.external }}
{{- if $bundled.enabled }}
{{- $host := printf "%s.%s.svc" (include "slo-gateway.redis.fullname" .) .Release.Namespace }}
{{- if $bundled.auth.existingSecret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $bundled.auth.existingSecret }}
      key: {{ $bundled.auth.existingSecretKey }}
- name: GATEWAY_REDIS_URL
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s:6379/0" $host | quote }}
{{- else }}
- name: GATEWAY_REDIS_URL
  value: {{ printf "redis://%s:6379/0" $host | quote }}
{{- end }}
{{- else if $ext.existingSecret }}
- name: GATEWAY_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $ext.existingSecret }}
      key: {{ $ext.existingSecretKey }}
{{- else if $ext.url }}
- name: GATEWAY_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "slo-gateway.secretName" . }}
      key: GATEWAY_REDIS_URL
{{- end }}
{{- end }}

{{/* Env var names the config refers to (api_key_env, admin_key_env, metrics_token_env), for
NOTES.txt. */}}
{{- define "slo-gateway.referencedEnv" -}}
{{- $names := list }}
{{- range .Values.config.endpoints }}
{{- if .api_key_env }}{{ $names = append $names .api_key_env }}{{ end }}
{{- end }}
{{- range $_, $tenant := .Values.config.tenants }}
{{- if and $tenant $tenant.api_key_env }}{{ $names = append $names $tenant.api_key_env }}{{ end }}
{{- end }}
{{- with .Values.config.server }}
{{- if .admin_key_env }}{{ $names = append $names .admin_key_env }}{{ end }}
{{- if .metrics_token_env }}{{ $names = append $names .metrics_token_env }}{{ end }}
{{- end }}
{{- $names | uniq | sortAlpha | join " " }}
{{- end }}

{{/* Where the ServiceMonitor reads the /metrics token when config.server.metrics_token_env
protects it: serviceMonitor.tokenSecret, else the Secret that gives the gateway that variable
(the chart's when secrets.values sets it, else secrets.existingSecret), at the key named after
the variable. Empty when /metrics is open. */}}
{{- define "slo-gateway.metricsTokenSecret" -}}
{{- $env := (.Values.config.server | default dict).metrics_token_env }}
{{- if $env }}
{{- $chosen := .Values.serviceMonitor.tokenSecret }}
{{- $name := $chosen.name }}
{{- if not $name }}
{{- if hasKey .Values.secrets.values $env }}
{{- $name = include "slo-gateway.secretName" . }}
{{- else if .Values.secrets.existingSecret }}
{{- $name = .Values.secrets.existingSecret }}
{{- else }}
{{- fail (printf "config.server.metrics_token_env is %s: set it in secrets.values or secrets.existingSecret, or name the Secret that holds it in serviceMonitor.tokenSecret" $env) }}
{{- end }}
{{- end }}
name: {{ $name }}
key: {{ $chosen.key | default $env }}
{{- end }}
{{- end }}

{{/* The config file: .Values.config plus an endpoint group per discovery.groups entry, found by
DNS through a headless Service (the chart's own for a selector, else the one named). */}}
{{- define "slo-gateway.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $groups := list }}
{{- with $config.endpoint_groups }}{{- $groups = . }}{{- end }}
{{- range .Values.discovery.groups }}
{{- $service := .service | default (printf "%s-%s" (include "slo-gateway.fullname" $) .name) }}
{{- $namespace := .namespace | default $.Release.Namespace }}
{{- $dns := printf "%s.%s.svc.cluster.local" $service $namespace }}
{{- $group := dict "name" .name "dns" $dns "port" (int .port) "member" .member }}
{{- with .pollIntervalSeconds }}{{- $_ := set $group "poll_interval_s" . }}{{- end }}
{{- $groups = append $groups $group }}
{{- end }}
{{- if $groups }}{{- $_ := set $config "endpoint_groups" $groups }}{{- end }}
{{- toYaml $config }}
{{- end }}
