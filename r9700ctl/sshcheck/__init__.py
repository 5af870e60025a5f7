"""SSH checks: can the tool reach, trust, log in to and work on a host, and if not, exactly why?

OpenSSH folds every connection failure into exit status 255 and Ansible into "UNREACHABLE"; the
operator then guesses. These checks walk the same path Ansible's ssh connection will take (same
address, port, user, keys and known_hosts files, read from the inventory and the ssh config it points
to with `ansible_ssh_common_args: -F FILE`) one step at a time with paramiko, and stop at the first step
that fails with its precise cause: the name does not resolve, connection refused, no answer, not SSH,
host key unknown or changed, authentication failed (naming the methods tried), no passwordless sudo,
no python3.

Host keys are checked the OpenSSH way (HostKeyAlias or "[host]:port" names, hashed entries, patterns).
Recording a new key is an explicit choice (`accept_new_host_keys`); a CHANGED key is always refused.
Library code: nothing here prints or exits; each step returns a CheckResult.
"""

from r9700ctl.sshcheck.connect import check_connection
from r9700ctl.sshcheck.known_hosts import KnownHostKey, fingerprint_of, known_keys_for, record_host_key
from r9700ctl.sshcheck.model import CheckResult, CommandResult, ConnectionOutcome, Session, SshTarget
from r9700ctl.sshcheck.remote import check_python, check_shell, check_sudo
from r9700ctl.sshcheck.target import parse_ssh_args, target_for

__all__ = [
    "CheckResult",
    "CommandResult",
    "ConnectionOutcome",
    "KnownHostKey",
    "Session",
    "SshTarget",
    "check_connection",
    "check_python",
    "check_shell",
    "check_sudo",
    "fingerprint_of",
    "known_keys_for",
    "parse_ssh_args",
    "record_host_key",
    "target_for",
]
