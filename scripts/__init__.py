"""Operations: the local Ray cluster now, the AWS verbs (launch, exec, status, logs, teardown) later."""
