{{/* The release's base name, at most 40 characters so that master names fit in 63. */}}
{{- define "redlockd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "redlockd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "redlockd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "redlockd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The daemon pods' selector. */}}
{{- define "redlockd.daemonSelector" -}}
app.kubernetes.io/name: {{ include "redlockd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: daemon
{{- end -}}

{{/* Every master pod's selector (all groups). */}}
{{- define "redlockd.masterSelector" -}}
app.kubernetes.io/name: {{ include "redlockd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: master
{{- end -}}

{{/* Name of master i of group g: dict "root" $ "group" name "index" i. */}}
{{- define "redlockd.masterName" -}}
{{- printf "%s-%s-m%d" (include "redlockd.fullname" .root) .group (int .index) -}}
{{- end -}}

{{- define "redlockd.secretName" -}}
{{- default (include "redlockd.fullname" .) .Values.auth.existingSecret -}}
{{- end -}}

{{/* Checks the master groups; fails the render with a message naming the value. */}}
{{- define "redlockd.checkGroups" -}}
{{- $seen := dict -}}
{{- if not .Values.masterGroups -}}
{{- fail "masterGroups: at least one group is needed" -}}
{{- end -}}
{{- if not (has .Values.redis.updateStrategy (list "OnDelete" "RollingUpdate")) -}}
{{- fail (printf "redis.updateStrategy: %q must be OnDelete or RollingUpdate" (toString .Values.redis.updateStrategy)) -}}
{{- end -}}
{{- range $i, $g := .Values.masterGroups -}}
{{- if not (regexMatch "^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$" (toString $g.name)) -}}
{{- fail (printf "masterGroups[%d].name: %q must be 1-32 characters from a-z 0-9 - (not starting or ending with -)" $i (toString $g.name)) -}}
{{- end -}}
{{- if hasKey $seen $g.name -}}
{{- fail (printf "masterGroups[%d].name: %q is used twice" $i $g.name) -}}
{{- end -}}
{{- $_ := set $seen $g.name true -}}
{{- if not (regexMatch "^[0-9]+$" (toString $g.masters)) -}}
{{- fail (printf "masterGroups[%d].masters: %v must be a whole number (an odd number, at least 3)" $i $g.masters) -}}
{{- end -}}
{{- $n := int $g.masters -}}
{{- if or (lt $n 3) (eq (mod $n 2) 0) (gt $n 99) -}}
{{- fail (printf "masterGroups[%d].masters: %d must be an odd number, 3 to 99" $i $n) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The host:port list of one group's masters: dict "root" $ "group" $g. */}}
{{- define "redlockd.groupAddrs" -}}
{{- $root := .root -}}
{{- $g := .group -}}
{{- range $i := until (int $g.masters) }}
- {{ printf "%s.%s.svc:%d" (include "redlockd.masterName" (dict "root" $root "group" $g.name "index" $i)) $root.Release.Namespace (int $root.Values.redis.port) | quote }}
{{- end -}}
{{- end -}}

{{- define "redlockd.scheme" -}}
{{- if .Values.tls.enabled -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* The group entries named by names (a list), in masterGroups order; fails on an unknown name. */}}
{{- define "redlockd.namedGroups" -}}
{{- $root := .root -}}
{{- $out := list -}}
{{- range $i, $n := .names -}}
{{- $found := false -}}
{{- range $g := $root.Values.masterGroups -}}
{{- if eq (toString $g.name) (toString $n) -}}
{{- $found = true -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "%s[%d]: %q is not a group of masterGroups" $.field $i (toString $n)) -}}
{{- end -}}
{{- end -}}
{{- range $g := $root.Values.masterGroups -}}
{{- if has (toString $g.name) ($.names | toStrings) -}}
{{- $out = append $out $g -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The groups keys are placed on: placement.groups, or every group. */}}
{{- define "redlockd.placedGroups" -}}
{{- if .Values.placement.groups -}}
{{- include "redlockd.namedGroups" (dict "root" . "names" .Values.placement.groups "field" "placement.groups") -}}
{{- else -}}
{{- toJson .Values.masterGroups -}}
{{- end -}}
{{- end -}}

{{/* Renders a list of groups as the daemon's master_groups entries. */}}
{{- define "redlockd.groupEntries" -}}
{{- $root := .root -}}
{{- range $g := .groups }}
- name: {{ $g.name | quote }}
  masters:
  {{- include "redlockd.groupAddrs" (dict "root" $root "group" $g) | nindent 4 }}
{{- end -}}
{{- end -}}
