{{/* Names: the release's prefix, cut to Kubernetes' 63 characters. */}}
{{- define "uma-serve.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "uma-serve.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "uma-serve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "uma-serve.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include "uma-serve.selector" (list . "gateway") */}}
{{- define "uma-serve.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "uma-serve.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "uma-serve.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret a key lives in: its existingSecret, else the one this chart writes. */}}
{{- define "uma-serve.secretName" -}}
{{- $root := index . 0 -}}
{{- $entry := index . 1 -}}
{{- default (printf "%s-keys" (include "uma-serve.fullname" $root)) $entry.existingSecret -}}
{{- end -}}

{{/* Redis's HOST:PORT for every component. */}}
{{- define "uma-serve.redisAddress" -}}
{{- if .Values.redis.enabled -}}
{{- printf "%s-redis:%d" (include "uma-serve.fullname" .) (int .Values.redis.port) -}}
{{- else -}}
{{- required "redis.enabled is false: set externalRedis.address (HOST:PORT)" .Values.externalRedis.address -}}
{{- end -}}
{{- end -}}

{{/* The keys a component reads, as files under /etc/uma/keys (flags take files, never values, so
     no key shows in a process list): include "uma-serve.keysVolume" (list . "cluster-key" ...) */}}
{{- define "uma-serve.keysVolume" -}}
{{- $root := index . 0 -}}
{{- $all := dict "api-key" $root.Values.secrets.apiKey "cluster-key" $root.Values.secrets.clusterKey "redis-password" $root.Values.secrets.redisPassword -}}
- name: keys
  projected:
    defaultMode: 0400
    sources:
      {{- range $file := rest . }}
      {{- $entry := index $all $file }}
      - secret:
          name: {{ include "uma-serve.secretName" (list $root $entry) }}
          items:
            - key: {{ $entry.key }}
              path: {{ $file }}
      {{- end }}
{{- end -}}

{{/* A Kubernetes memory quantity in MiB (Ki, Mi, Gi, Ti or bytes); -1 when it cannot tell. */}}
{{- define "uma-serve.mebibytes" -}}
{{- $q := toString . -}}
{{- if regexMatch "^[0-9]+Ki$" $q -}}{{ div (trimSuffix "Ki" $q | int64) 1024 }}
{{- else if regexMatch "^[0-9]+Mi$" $q -}}{{ trimSuffix "Mi" $q | int64 }}
{{- else if regexMatch "^[0-9]+Gi$" $q -}}{{ mul (trimSuffix "Gi" $q | int64) 1024 }}
{{- else if regexMatch "^[0-9]+Ti$" $q -}}{{ mul (trimSuffix "Ti" $q | int64) 1048576 }}
{{- else if regexMatch "^[0-9]+$" $q -}}{{ div ($q | int64) 1048576 }}
{{- else -}}-1
{{- end -}}
{{- end -}}
