{{/* Names, labels and the checks every template shares. */}}

{{- define "kafka-health.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kafka-health.fullname" -}}
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

{{- define "kafka-health.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kafka-health.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component: include "kafka-health.selectorLabels" (list . "serve") */}}
{{- define "kafka-health.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "kafka-health.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "kafka-health.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kafka-health.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kafka-health.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The Secret holding tokens and the store URL: the chart's or auth.existingSecret. */}}
{{- define "kafka-health.secretName" -}}
{{- default (printf "%s-secrets" (include "kafka-health.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "kafka-health.serviceURL" -}}
{{- printf "%s://%s.%s.svc:%d" (include "kafka-health.scheme" .) (include "kafka-health.fullname" .) .Release.Namespace (int .Values.service.port) }}
{{- end }}

{{- define "kafka-health.dataDir" -}}/var/lib/kafka-health/data{{- end }}
{{- define "kafka-health.storeDir" -}}/var/lib/kafka-health/store{{- end }}
{{- define "kafka-health.tokensDir" -}}/etc/kafka-health/tokens{{- end }}
{{- define "kafka-health.zookeeperDir" -}}/etc/kafka-health/zookeeper{{- end }}
{{- define "kafka-health.tlsDir" -}}/etc/kafka-health/tls{{- end }}

{{/* The chart's own ZooKeeper Secret (<fullname>-zookeeper): the files and passwords of every scope below
that has no existingSecret of its own. */}}
{{- define "kafka-health.zookeeperOwnSecretName" -}}
{{- printf "%s-zookeeper" (include "kafka-health.fullname" .) }}
{{- end }}

{{/* The shared ZooKeeper client's Secret: the chart's or kafka.zookeeperClient.existingSecret. */}}
{{- define "kafka-health.zookeeperSecretName" -}}
{{- default (include "kafka-health.zookeeperOwnSecretName" .) .Values.kafka.zookeeperClient.existingSecret }}
{{- end }}

{{/* JSON list of the ZooKeeper client scopes: the shared kafka.zookeeperClient (KAFKA_HEALTH_ZOOKEEPER__*,
files at the top of /etc/kafka-health/zookeeper/) and each kafka.clusters.NAME.zookeeperClient
(KAFKA_HEALTH_CLUSTERS__NAME__ZOOKEEPER__*, files under /etc/kafka-health/zookeeper/NAME/, keys NAME.FILE in
the chart's Secret). A cluster's scope is "explicit": a value it sets, even false or "", is rendered, so it
wins over the shared one (the product merges each cluster's fields over the shared section). */}}
{{- define "kafka-health.zookeeperScopes" -}}
{{- $dir := include "kafka-health.zookeeperDir" . }}
{{- $own := include "kafka-health.zookeeperOwnSecretName" . }}
{{- $shared := .Values.kafka.zookeeperClient }}
{{- $scopes := list (dict "name" "" "client" $shared "env" "KAFKA_HEALTH_ZOOKEEPER__" "dir" $dir "path" "" "key" "" "explicit" false "secret" (include "kafka-health.zookeeperSecretName" .)) }}
{{- range $name, $cluster := .Values.kafka.clusters }}
{{- $client := (get ($cluster | default dict) "zookeeperClient") | default dict }}
{{- $scopes = append $scopes (dict
  "name" $name
  "client" $client
  "env" (printf "KAFKA_HEALTH_CLUSTERS__%s__ZOOKEEPER__" (upper $name))
  "dir" (printf "%s/%s" $dir $name)
  "path" (printf "%s/" $name)
  "key" (printf "%s." $name)
  "explicit" true
  "secret" (default $own (get $client "existingSecret"))) }}
{{- end }}
{{- toJson $scopes }}
{{- end }}

{{/* What a scope's files and passwords are: {value name: [file or key name, content]}. */}}
{{- define "kafka-health.zookeeperContent" -}}
{{- $zk := .client }}
{{- toJson (dict
  "properties" (list "client.properties" (dig "properties" "" $zk))
  "jaasConfig" (list "jaas.conf" (dig "jaasConfig" "" $zk))
  "truststore" (list "truststore.pem" (dig "ssl" "truststore" "" $zk))
  "keystore" (list "keystore.pem" (dig "ssl" "keystore" "" $zk))
  "keystorePassword" (list "keystore-password" (dig "ssl" "keystorePassword" "" $zk))
  "authDigest" (list "auth-digest" (dig "authDigest" "" $zk))) }}
{{- end }}

{{/* JSON {value name: the Secret's key} of what a scope has: with existingSecret the keys named in its
secretKeys, else the values that are set, under the chart's own key names (a cluster's prefixed NAME.). */}}
{{- define "kafka-health.zookeeperKeys" -}}
{{- $scope := . }}
{{- $zk := .client }}
{{- $keys := dict }}
{{- range $name, $entry := include "kafka-health.zookeeperContent" . | fromJson }}
{{- if get $zk "existingSecret" }}
{{- with dig "secretKeys" $name "" $zk }}{{ $_ := set $keys $name . }}{{ end }}
{{- else if index $entry 1 }}
{{- $_ := set $keys $name (printf "%s%s" $scope.key (index $entry 0)) }}
{{- end }}
{{- end }}
{{- toJson $keys }}
{{- end }}

{{/* The ZooKeeper settings of every scope, pointing at the mounted files (ConfigMap: no secrets). */}}
{{- define "kafka-health.zookeeperSettings" -}}
{{- $env := dict }}
{{- range $scope := include "kafka-health.zookeeperScopes" . | fromJsonArray }}
{{- $zk := $scope.client }}
{{- $ssl := get $zk "ssl" | default dict }}
{{- $keys := include "kafka-health.zookeeperKeys" $scope | fromJson }}
{{- $p := $scope.env }}
{{- if hasKey $keys "properties" }}{{ $_ := set $env (print $p "CLIENT_CONFIG") (printf "%s/client.properties" $scope.dir) }}{{ end }}
{{- if hasKey $keys "jaasConfig" }}{{ $_ := set $env (print $p "SASL_JAAS_CONFIG") (printf "%s/jaas.conf" $scope.dir) }}{{ end }}
{{- with get $zk "saslClientConfig" }}{{ $_ := set $env (print $p "SASL_CLIENTCONFIG") . }}{{ end }}
{{- if $scope.explicit }}
{{- if hasKey $ssl "clientEnable" }}{{ $_ := set $env (print $p "SSL_CLIENT_ENABLE") (toString $ssl.clientEnable) }}{{ end }}
{{- if hasKey $ssl "endpointIdentificationAlgorithm" }}{{ $_ := set $env (print $p "SSL_ENDPOINT_IDENTIFICATION_ALGORITHM") $ssl.endpointIdentificationAlgorithm }}{{ end }}
{{- if hasKey $zk "setAcl" }}{{ $_ := set $env (print $p "SET_ACL") (toString $zk.setAcl) }}{{ end }}
{{- else }}
{{- if $ssl.clientEnable }}
{{- $_ := set $env (print $p "SSL_CLIENT_ENABLE") "true" }}
{{- $_ := set $env (print $p "SSL_ENDPOINT_IDENTIFICATION_ALGORITHM") $ssl.endpointIdentificationAlgorithm }}
{{- end }}
{{- if $zk.setAcl }}{{ $_ := set $env (print $p "SET_ACL") "true" }}{{ end }}
{{- end }}
{{- if hasKey $keys "truststore" }}
{{- $_ := set $env (print $p "SSL_TRUSTSTORE_LOCATION") (printf "%s/truststore.pem" $scope.dir) }}
{{- $_ := set $env (print $p "SSL_TRUSTSTORE_TYPE") "PEM" }}
{{- end }}
{{- if hasKey $keys "keystore" }}
{{- $_ := set $env (print $p "SSL_KEYSTORE_LOCATION") (printf "%s/keystore.pem" $scope.dir) }}
{{- $_ := set $env (print $p "SSL_KEYSTORE_TYPE") "PEM" }}
{{- end }}
{{- end }}
{{- toJson $env }}
{{- end }}

{{/* The ZooKeeper passwords of every scope, from its Secret (every container reads the settings). */}}
{{- define "kafka-health.zookeeperEnv" -}}
{{- range $scope := include "kafka-health.zookeeperScopes" . | fromJsonArray }}
{{- $keys := include "kafka-health.zookeeperKeys" $scope | fromJson }}
{{- range $name, $field := dict "keystorePassword" "SSL_KEYSTORE_PASSWORD" "authDigest" "AUTH_DIGEST" }}
{{- if hasKey $keys $name }}
- name: {{ print $scope.env $field }}
  valueFrom:
    secretKeyRef:
      name: {{ $scope.secret }}
      key: {{ index $keys $name }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* JSON list of the Secrets the ZooKeeper files come from: [{secretName, items: [{key, path}]}], the shared
scope's files at the top of the mount, each cluster's under NAME/. */}}
{{- define "kafka-health.zookeeperSources" -}}
{{- $sources := list }}
{{- range $scope := include "kafka-health.zookeeperScopes" . | fromJsonArray }}
{{- $keys := include "kafka-health.zookeeperKeys" $scope | fromJson }}
{{- $items := list }}
{{- range $name, $file := dict "properties" "client.properties" "jaasConfig" "jaas.conf" "truststore" "truststore.pem" "keystore" "keystore.pem" }}
{{- if hasKey $keys $name }}
{{- $items = append $items (dict "key" (index $keys $name) "path" (print $scope.path $file)) }}
{{- end }}
{{- end }}
{{- if $items }}
{{- $sources = append $sources (dict "secretName" $scope.secret "items" $items "shared" (not $scope.explicit)) }}
{{- end }}
{{- end }}
{{- toJson $sources }}
{{- end }}

{{/* The ZooKeeper files, mounted read-only in every container (the settings are checked at start-up). */}}
{{- define "kafka-health.zookeeperMount" -}}
{{- if include "kafka-health.zookeeperSources" . | fromJsonArray }}
- name: zookeeper
  mountPath: {{ include "kafka-health.zookeeperDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/* One Secret volume when only the shared client has files (as a single-cluster release always had);
with clusters' files, a projected volume of every Secret they come from. */}}
{{- define "kafka-health.zookeeperVolume" -}}
{{- $sources := include "kafka-health.zookeeperSources" . | fromJsonArray }}
{{- if and (eq (len $sources) 1) (index $sources 0).shared }}
- name: zookeeper
  secret:
    secretName: {{ (index $sources 0).secretName }}
    defaultMode: 0440
    items:
      {{- toYaml (index $sources 0).items | nindent 6 }}
{{- else if $sources }}
- name: zookeeper
  projected:
    defaultMode: 0440
    sources:
      {{- range $sources }}
      - secret:
          name: {{ .secretName }}
          items:
            {{- toYaml .items | nindent 12 }}
      {{- end }}
{{- end }}
{{- end }}

{{/* The service's own TLS: http or https. */}}
{{- define "kafka-health.scheme" -}}
{{- if .Values.serve.tls.secretName }}https{{ else }}http{{ end }}
{{- end }}

{{/* Is a tokens file / clear tokens / a store URL in the Secret? */}}
{{- define "kafka-health.hasTokensFile" -}}
{{- if .Values.auth.existingSecret }}{{ if .Values.auth.secretKeys.tokensFile }}true{{ end }}
{{- else if .Values.auth.tokensFile }}true{{ end }}
{{- end }}
{{- define "kafka-health.hasTokens" -}}
{{- if .Values.auth.existingSecret }}{{ if .Values.auth.secretKeys.tokens }}true{{ end }}
{{- else if .Values.auth.tokens }}true{{ end }}
{{- end }}

{{/* The samples' transport, as `collect --sink` and `analytics --source` take it. */}}
{{- define "kafka-health.transport" -}}
{{- if eq .Values.analytics.transport.type "kafka" }}
{{- printf "kafka:%s/%s" .Values.analytics.transport.kafka.bootstrap .Values.analytics.transport.kafka.topic }}
{{- else }}
{{- printf "spool:%s/spool" (include "kafka-health.dataDir" .) }}
{{- end }}
{{- end }}

{{/* Fails the release on values that cannot work (the schema checks types and names). */}}
{{- define "kafka-health.validate" -}}
{{- if and .Values.kafka.zookeeper .Values.kafka.clusters }}
{{- fail "kafka.zookeeper and kafka.clusters are both set: give one cluster's ZooKeeper (kafka.zookeeper) or several named clusters (kafka.clusters), not both" }}
{{- end }}
{{- if not (or .Values.kafka.zookeeper .Values.kafka.clusters) }}
{{- fail "kafka.zookeeper or kafka.clusters is required: one cluster's ZooKeeper, HOST:PORT[,HOST:PORT...][/chroot], or several named clusters" }}
{{- end }}
{{- range $name, $cluster := .Values.kafka.clusters }}
{{- if not (regexMatch "^[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?$" $name) }}
{{- fail (printf "kafka.clusters.%s: not a cluster name (1-63 lower-case letters, digits, '-' or '_', starting and ending with a letter or digit)" $name) }}
{{- end }}
{{- if contains "__" $name }}
{{- fail (printf "kafka.clusters.%s: a cluster name cannot hold \"__\" (the settings' environment variables nest with it)" $name) }}
{{- end }}
{{- if not (get ($cluster | default dict) "zookeeper") }}
{{- fail (printf "kafka.clusters.%s.zookeeper is required: the cluster's ZooKeeper, HOST:PORT[,HOST:PORT...][/chroot]" $name) }}
{{- end }}
{{- end }}
{{- if and (gt (int .Values.serve.replicaCount) 1) (ne .Values.store.type "postgresql") }}
{{- fail "serve.replicaCount > 1 needs store.type=postgresql: every replica reads and writes the same store, which a SQLite file on one volume cannot be" }}
{{- end }}
{{- if and (eq .Values.store.type "postgresql") (not .Values.store.postgresql.url) (not (and .Values.auth.existingSecret .Values.auth.secretKeys.storeUrl)) }}
{{- fail "store.type=postgresql needs store.postgresql.url, or auth.existingSecret with the URL under auth.secretKeys.storeUrl" }}
{{- end }}
{{- if and .Values.analytics.enabled (not (hasPrefix "local" .Values.analytics.spark.master)) (ne .Values.analytics.transport.type "kafka") }}
{{- fail "analytics.spark.master is an external Spark master: its executors cannot read the pod's spool directory, so set analytics.transport.type=kafka" }}
{{- end }}
{{- $zk := .Values.kafka.zookeeperClient }}
{{- if and (or $zk.ssl.truststore $zk.ssl.keystore) (not $zk.ssl.clientEnable) (not $zk.properties) (not $zk.existingSecret) }}
{{- fail "kafka.zookeeperClient.ssl.truststore/keystore without ssl.clientEnable: the stores would be mounted and TLS left off; set kafka.zookeeperClient.ssl.clientEnable=true" }}
{{- end }}
{{- range $name, $cluster := .Values.kafka.clusters }}
{{- $own := (get ($cluster | default dict) "zookeeperClient") | default dict }}
{{- $ssl := get $own "ssl" | default dict }}
{{- $enabled := ternary $ssl.clientEnable $zk.ssl.clientEnable (hasKey $ssl "clientEnable") }}
{{- if and (or (get $ssl "truststore") (get $ssl "keystore")) (not $enabled) (not (get $own "properties")) (not $zk.properties) (not (get $own "existingSecret")) }}
{{- fail (printf "kafka.clusters.%s.zookeeperClient.ssl.truststore/keystore without ssl.clientEnable (its own or kafka.zookeeperClient's): the stores would be mounted and TLS left off" $name) }}
{{- end }}
{{- end }}
{{- if and .Values.analytics.enabled (eq .Values.analytics.transport.type "kafka") (not .Values.analytics.transport.kafka.bootstrap) }}
{{- fail "analytics.transport.type=kafka needs analytics.transport.kafka.bootstrap (HOST:PORT[,HOST:PORT...])" }}
{{- end }}
{{- end }}

{{/* The service's tokens (from the Secret). */}}
{{- define "kafka-health.tokenEnv" -}}
{{- if eq (include "kafka-health.hasTokens" .) "true" }}
- name: KAFKA_HEALTH_SERVICE__TOKENS
  valueFrom:
    secretKeyRef:
      name: {{ include "kafka-health.secretName" . }}
      key: {{ .Values.auth.secretKeys.tokens }}
      optional: {{ not (empty .Values.auth.existingSecret) }}
{{- end }}
{{- if eq (include "kafka-health.hasTokensFile" .) "true" }}
- name: KAFKA_HEALTH_SERVICE__TOKENS_FILE
  value: {{ printf "%s/%s" (include "kafka-health.tokensDir" .) .Values.auth.secretKeys.tokensFile | quote }}
{{- end }}
{{- end }}

{{/* The PostgreSQL store's URL (from the Secret); the SQLite store's is in the ConfigMap. */}}
{{- define "kafka-health.storeEnv" -}}
{{- if eq .Values.store.type "postgresql" }}
- name: KAFKA_HEALTH_ANALYTICS__STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "kafka-health.secretName" . }}
      key: {{ .Values.auth.secretKeys.storeUrl }}
{{- end }}
{{- end }}

{{/* Restart the pods when the settings or the secrets change. */}}
{{- define "kafka-health.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
checksum/zookeeper: {{ include (print .Template.BasePath "/zookeeper-secret.yaml") . | sha256sum }}
{{- end }}

{{/* spark-submit's arguments for the driver PySpark starts in the analytics container. With an external
master (client mode) the executors connect back to the pod's IP on fixed ports. */}}
{{- define "kafka-health.sparkSubmitArgs" -}}
{{- $args := list "--driver-memory" .Values.analytics.spark.driverMemory }}
{{- if not (hasPrefix "local" .Values.analytics.spark.master) }}
{{- $args = concat $args (list
  "--conf" "spark.driver.host=$(POD_IP)"
  "--conf" "spark.driver.bindAddress=0.0.0.0"
  "--conf" (printf "spark.driver.port=%d" (int .Values.analytics.spark.driverPort))
  "--conf" (printf "spark.blockManager.port=%d" (int .Values.analytics.spark.blockManagerPort))
  "--conf" (printf "spark.driver.blockManager.port=%d" (int .Values.analytics.spark.blockManagerPort))
) }}
{{- end }}
{{- $args = concat $args .Values.analytics.spark.extraArgs (list "pyspark-shell") }}
{{- join " " $args }}
{{- end }}

{{- define "kafka-health.dnsEgress" -}}
- ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- end }}
